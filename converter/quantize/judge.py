"""Every quantized candidate against the float model, on the held-out samples, each run once.

A port compares many quantized models with the same float references: bias correction's
candidates (plain or corrected biases, two range layouts), ``auto``'s remedies, the per-layer
table's keep-float variants, then the verdict.  :class:`Judge` holds the held-out samples
(:mod:`.holdout`), computes the float model's outputs on each once (a float graph: onnxruntime
with its optimizations), and each candidate's outputs on each once (a QDQ graph: optimizations
off, :func:`converter.runtimes.onnxruntime.session`), so the verdict of the candidate bias
correction chose costs no further run, and a score on the first 4 samples is extended to 8
by running 4 more.

Scores and verdicts read the outputs after the port's post-processing (the trailing ops cut off
the model), like the verdict of the exported file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import onnx

from ..verify.stages import Tolerances
from .holdout import QuantSamples
from .verify import QuantVerification, compare_quantized

#: Samples a score (bias correction's candidates, auto's remedies) is taken on.  Candidates differ
#: by whole dB (ResNet-18 at 224x224, bias correction: 43.1 / 44.2 / 46.7 / 46.9 dB), which the
#: median of 8 samples orders as the median of 16 did; 16 made scoring a third of the quantize
#: stage (issue 29).
SCORE_SAMPLES = 8


class Judge:
    """The float model and its quantized candidates on ``samples.held`` (see the module docstring)."""

    def __init__(self, float_model: onnx.ModelProto, samples: QuantSamples, tolerances: Tolerances | None = None,
                 mode: str = "int8", postprocess: Callable | None = None,
                 reference: Callable | None = None):
        self.float_model, self.samples, self.mode = float_model, samples, mode
        self.tolerances = tolerances
        self._post = postprocess or (lambda outputs: outputs)
        self._reference = reference  # a runner of the float model (else an optimized session)
        self._float_session = None
        self._references: dict[int, dict] = {}
        #: id(candidate) -> (candidate, session or None, {sample index: outputs})
        self._runs: dict[int, tuple] = {}
        self._lock = threading.Lock()
        #: Model runs done (tests read them): float references, candidate runs.
        self.float_runs = self.candidate_runs = 0

    @property
    def held(self) -> list[dict]:
        return self.samples.held

    @property
    def label(self) -> str:
        """The held-out samples in full ("25 samples held out of the calibration set (seed 0)")."""
        return self.samples.held_label

    @property
    def short_label(self) -> str:
        return self.samples.short_label

    # ------------------------------------------------------------------------------ outputs

    def reference(self, k: int) -> dict[str, np.ndarray]:
        """The float model's (post-processed) outputs on held-out sample ``k``."""
        if k not in self._references:
            value = self._post(self._run_float(self.held[k]))
            with self._lock:
                self._references.setdefault(k, value)
                self.float_runs += 1
        return self._references[k]

    def _run_float(self, sample: dict) -> dict:
        if self._reference is not None:
            return self._reference(sample)
        from ..runtimes.onnxruntime import run_session
        from .float_pass import optimized_session
        from .parallel import SESSION_THREADS

        with self._lock:
            if self._float_session is None:
                self._float_session = optimized_session(self.float_model, [], threads=SESSION_THREADS)
        return run_session(self._float_session, sample)

    def outputs(self, candidate: onnx.ModelProto, k: int) -> dict[str, np.ndarray]:
        """``candidate``'s (post-processed) outputs on held-out sample ``k`` (graph optimizations off)."""
        from ..runtimes.onnxruntime import run_session, session
        from .parallel import SESSION_THREADS

        with self._lock:
            model, sess, outputs = self._runs.setdefault(id(candidate), (candidate, None, {}))
            if k in outputs:
                return outputs[k]
            if sess is None:
                sess = session(candidate, threads=SESSION_THREADS)
                self._runs[id(candidate)] = (model, sess, outputs)
        value = self._post(run_session(sess, self.held[k]))
        with self._lock:
            outputs.setdefault(k, value)
            self.candidate_runs += 1
        return outputs[k]

    def prefetch(self, candidate: onnx.ModelProto, indices) -> None:
        """The references and ``candidate``'s outputs on ``indices``, :data:`.parallel.WORKERS`
        runs at a time (:mod:`.parallel`)."""
        from .parallel import ordered_map

        jobs = [(self.reference, k) for k in indices if k not in self._references]
        jobs += [(lambda k: self.outputs(candidate, k), k) for k in indices]
        for _ in ordered_map(lambda job: job[0](job[1]), jobs):
            pass

    def release(self, candidate: onnx.ModelProto) -> None:
        """Free ``candidate``'s session (its outputs stay): it will not run again."""
        with self._lock:
            if id(candidate) in self._runs:
                model, _, outputs = self._runs[id(candidate)]
                self._runs[id(candidate)] = (model, None, outputs)

    def forget(self, candidate: onnx.ModelProto) -> None:
        """Drop ``candidate`` and its outputs (a remedy that was undone)."""
        with self._lock:
            self._runs.pop(id(candidate), None)

    # ------------------------------------------------------------------------------ judging

    def verification(self, candidate: onnx.ModelProto, count: int | None = None) -> QuantVerification:
        """``candidate`` against the float model on the first ``count`` held-out samples (all)."""
        indices = range(len(self.held) if count is None else min(count, len(self.held)))
        self.prefetch(candidate, indices)
        by_id = {id(self.held[k]): k for k in indices}
        quality = compare_quantized(lambda s: self.reference(by_id[id(s)]), lambda s: self.outputs(candidate, by_id[id(s)]),
                                    [self.held[k] for k in indices], self.tolerances, self.mode)
        quality.samples_from = self.label if count is None or count >= len(self.held) else \
            f"the first {len(indices)} of {self.short_label}"
        return quality

    def score(self, candidate: onnx.ModelProto, count: int = SCORE_SAMPLES) -> float:
        """The worst output's median SQNR (dB) over the first ``count`` held-out samples."""
        return worst_sqnr(self.verification(candidate, count))

    def scorer(self):
        """Bias correction's :class:`.bias_correction.Scorer` of these held-out samples: every
        candidate it does not keep is forgotten."""
        from .bias_correction import Scorer

        def done(model, keep: bool):
            (self.release if keep else self.forget)(model)

        return Scorer(self.score, min(SCORE_SAMPLES, len(self.held)), self.score_label(), done)

    def score_label(self, count: int = SCORE_SAMPLES) -> str:
        n = min(count, len(self.held))
        return self.short_label if n >= len(self.held) else f"the first {n} of {self.short_label}"


def worst_sqnr(quality: QuantVerification) -> float:
    return min((o.sqnr_db for o in quality.outputs), default=float("nan"))
