"""One framework x hardware of a port: its stages, in order, each recording what it found.

:class:`PairPort` runs check -> legalize -> [custom] -> [split] -> [quantize] -> export ->
verify for one pair, inside the port's temporary directory, on the models its
:class:`~converter.port.session.PortSession` loaded once.  Each stage writes its part of
``report.json`` and its facts (:class:`~converter.port.outcome.StageFacts`); the outcome is
decided once, by :func:`~converter.port.outcome.decide`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import BadInput, Unsupported
from ..infra.fsutil import atomic_copy_file, atomic_write_text
from ..infra.ownership import files_under
from ..ir.memory import release
from .outcome import StageFacts, decide
from .result import PortResult


class StageTimer:
    """Wall seconds per stage (``report.json`` ``timings``), and a progress callback per stage."""

    def __init__(self, progress=None, heavy: bool = False):
        self.timings: dict[str, float] = {}
        self.progress = progress
        self.heavy = heavy  # weights >= memory.RELEASE_MIN_BYTES: free dropped copies per stage

    @contextmanager
    def stage(self, name: str):
        if self.progress:
            self.progress(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            # graphsurgeon graphs are cyclic: what a stage dropped (whole copies of the weights)
            # is freed only by the cycle collector -- now, not during the next stage's peak.
            release(self.heavy)
            self.timings[name] = round(time.perf_counter() - start, 4)


class PairPort:
    """The stages of one pair.  ``models``: the session's (original, normalized) pair, as this
    target's path reads them; ``tmp``: the port's temporary output directory."""

    def __init__(self, session, framework: str, hw: str, tmp: Path, out_dir: Path, timer: StageTimer, verify=None):
        from .. import targets
        from ..targets.oracles import resolve

        self.session, self.request, self.matrix = session, session.request, session.matrix
        if verify is not None and self.request.verify is not None:
            self.request = dataclasses.replace(self.request, verify=verify)
        self.framework, self.hw, self.tmp, self.out_dir, self.timer = framework, hw, tmp, out_dir, timer
        self.target = targets.get(framework)
        self.runtime = resolve(framework, dict(self.request.runtimes), hw)
        self.facts = StageFacts(framework=framework, hw=hw, custom_layers=self.target.custom_layers)
        self.report: dict[str, Any] = {"edgeconv_version": __version__, "command_line": self.request.command_line,
                                       "model": session.model_label, "target": framework, "hw": hw}
        self.legal = self.postprocess = self.quant = self.artifact = self.verdict = None

    def note(self, **facts) -> None:
        self.facts = dataclasses.replace(self.facts, **facts)

    def run(self, original, model, shared, quant_plan) -> PortResult:
        """Every stage; returns the result once ``report.json`` and ``report.html`` are written."""
        early = self._start_reference_runs(shared, original, model, quant_plan is None)
        if self.session.model_sha256:
            self.report["model_sha256"] = self.session.model_sha256
        self.report["ops_before"] = _histogram(model)
        self.check(model)
        final = self.legalize(model)
        runner = self._legalized_runner(shared, model, final, early)
        self.save_models(model, final)
        if quant_plan is not None and self.ok:
            self.quantize(final, quant_plan)
        if self.ok:
            self.export(self.quant.export_model if self.quant is not None else final)
        if self.ok and self.request.verifies:
            self.verify(original, model, final, shared, runner)
        if self.quant is not None and self.artifact is not None:
            self.measure_file()
        return self.finish(model)

    @property
    def ok(self) -> bool:
        """No stage so far stops the port (what :func:`decide` would call ok without verification)."""
        f = self.facts
        return not f.unresolved and not (f.custom_nodes and not f.custom_layers) and f.export_error is None

    # ------------------------------------------------------------------------------- stages

    def check(self, model) -> None:
        from ..legalize.check import check_model

        with self.timer.stage("check"):
            checked = check_model(model, self.framework, self.hw, self.matrix)
        self.report["check"] = checked.to_json()

    def legalize(self, model):
        """Rewrite, mark custom layers (and write their scaffolds), cut trailing post-processing."""
        from ..legalize.apply import legalize

        spec = self.request.legalize
        with self.timer.stage("legalize"):
            legal = legalize(model, self.framework, self.hw, self.matrix, retrain_hook=spec.retrain_hook,
                             custom_ops=spec.custom_ops)
        self.legal = legal
        self.report["plan"] = legal.plan.to_json()
        self.report["applied_rules"] = [{"rule": r, "node": n} for r, n in legal.applied]
        self.note(unresolved=tuple(legal.unresolved), custom_nodes=tuple(sorted(legal.custom_nodes)))
        # CoreML cannot carry custom layers but has a scaffold (the composite-op path); a target
        # with neither gets none (the port is unsupported, naming the nodes)
        if legal.custom_nodes and (self.target.custom_layers or self.target.custom_module is not None):
            from ..custom import write_custom_layers
            from ..legalize.why_custom import why_custom

            with self.timer.stage("custom"):
                self.report["custom_layers"] = write_custom_layers(
                    legal.model, legal.custom_nodes, self.target, self.tmp / "custom",
                    reasons={e.node: e.reason for e in legal.plan.entries}, seed=self.session.seed,
                    why=lambda graph, node: why_custom(graph, node, self.framework))
        final = legal.model
        if self.ok and legal.postprocess_nodes:
            from ..postproc import split

            with self.timer.stage("split"):
                max_outputs = self.matrix.properties(self.framework, self.hw).get("max_outputs")
                cut = split(final, set(legal.postprocess_nodes), max_outputs=max_outputs, out_dir=self.tmp / "postproc")
            final, self.postprocess = cut.model, cut
            self.report["postprocess"] = cut.manifest
        return final

    def save_models(self, model, final) -> None:
        from ..ir.onnx_file import save_onnx

        save_onnx(model, self.tmp / "normalized.onnx")
        if final is model and not (self.tmp / "normalized.onnx.data").exists():
            atomic_copy_file(self.tmp / "normalized.onnx", self.tmp / "legalized.onnx")  # legalize changed nothing
        else:
            save_onnx(final, self.tmp / "legalized.onnx")
        self.report["ops_after"] = _histogram(final)

    def quantize(self, final, plan) -> None:
        from ..quantize.port import quantize_for_port

        with self.timer.stage("quantize"):
            self.quant = quantize_for_port(final, self.request.quant, self.request.verify, plan, self.target, self.tmp,
                                           warn=_warn, hw=self.hw, postprocess=self.postprocess.postprocess
                                           if self.postprocess is not None else None)
        self.report["quantization"] = _jsonable(self.quant.to_json())

    def export(self, model) -> None:
        quant, legal = self.quant, self.legal
        options = dataclasses.replace(
            self.request.export, name=self.session.model_name,
            fp16_weights=self.request.export.fp16_weights or (quant is not None and quant.export_fp16),
            fallback_nodes=tuple(sorted(legal.fallback_nodes)),
            # the user's file, which the files then name (CoreML's metadata), instead of the
            # exporter hashing the ONNX it was given
            source_sha256=self.report.get("model_sha256"),
            quantization=quant.export_spec() if quant is not None and quant.native_integer else None)
        try:
            with self.timer.stage("export"):
                self.artifact = self.target.export(model, self.tmp, self.hw, options)
        except Unsupported as err:
            # The matrix allowed the op but the exporter cannot express this instance of it
            # (e.g. a rank MACE's kernels lack): no remedy was planned for that, so say so.
            self.note(export_error=str(err))
            return
        self.report["artifact"] = {
            "runtime": self.artifact.runtime, "meta": _jsonable(self.artifact.meta),
            "files": sorted(str(Path(f).resolve().relative_to(self.tmp.resolve())) for f in self.artifact.files)}

    def verify(self, original, model, final, shared, legalized_runner) -> None:
        """Every stage against the original; an integer file by SQNR against the float model."""
        from .verification import (PortModels, TargetUnderTest, judge_integer_file, retrain_note,
                                   verify_port_stages)

        quant, legal = self.quant, self.legal
        integer_file = quant is not None and quant.native_integer and self.artifact is not None
        # An integer file is judged by SQNR against the float model (below), not by the float
        # tolerances: the float stages are verified without it.
        judged = TargetUnderTest(custom_nodes=tuple(sorted(legal.custom_nodes))) if integer_file else \
            TargetUnderTest(self.target, self.artifact, self.runtime, tuple(sorted(legal.custom_nodes)))
        with self.timer.stage("verify"):
            try:
                self.verdict = verify_port_stages(PortModels(original, model, final, self.postprocess), judged,
                                                  self.request.verify, self.tmp, self.out_dir, shared, legalized_runner)
                if integer_file:
                    self.note(file_problem=judge_integer_file(quant, self.target, self.runtime, self.artifact))
                    self.report["quantization"] = _jsonable(quant.to_json())
            except BadInput as err:
                if "onnxruntime" not in str(err) and "no value for" not in str(err):
                    raise
                # Nothing to compare against (e.g. the original has an op onnxruntime lacks).
                self.note(not_verified=str(err))
                self.report["verification"] = {"ok": None, "summary": f"not verified: {err}"}
                return
        from ..verify.report import to_json

        verdict = self.verdict
        self.report["verification"] = to_json(verdict)
        self.note(verify_ok=verdict.ok, verify_summary=verdict.summary() if not verdict.ok else "",
                  unverified_reason=verdict.unverified.reason if verdict.unverified is not None else None,
                  retrain_note=retrain_note(legal, self.request.legalize.retrain_hook) if not verdict.ok else "")

    def measure_file(self) -> None:
        """The quantized port's file: its size, and (when the port verifies) its latency in the
        framework's runtime on the first held-out sample (``Target.latency``; LiteRT)."""
        quant = self.quant
        quant.file_bytes = sum(_bytes(Path(f)) for f in self.artifact.files)
        if self.request.verifies and quant.first_held is not None:
            with self.timer.stage("latency"):
                quant.file_latency = self.target.latency(self.artifact, quant.first_held)
            if quant.file_latency is None:
                self.timer.timings.pop("latency", None)  # nothing measured: no stage
        self.report["quantization"] = _jsonable(quant.to_json())

    def finish(self, model) -> PortResult:
        """Decide the outcome, write report.json and report.html; the result."""
        from .verification import oracle_name

        quant = self.quant
        if quant is not None:
            problem = quant.port_status("ok", "")
            dtypes = set(self.matrix.properties(self.framework, self.hw).get("dtypes", []))
            self.note(quant_problem=None if problem == ("ok", "") else problem,
                      float_file_on_integer_hw=(not quant.native and self.artifact is not None
                                                and not {"float32", "float16"} & dtypes))
        outcome = decide(self.facts)
        if outcome.drop_artifact:
            for f in self.artifact.files:
                _remove(Path(f))
            self.report.pop("artifact", None)
        oracle = oracle_name(self.target, self.artifact, self.runtime, self.verdict, self.hw)
        self.report["oracle"] = oracle
        self.report["status"], self.report["reason"] = outcome.status, outcome.reason
        self.report["timings"] = self.timer.timings
        atomic_write_text(self.tmp / "report.json", json.dumps(self.report, indent=2, sort_keys=True, default=str))
        from ..report.port_page import write_port_page

        write_port_page(self.report, model, self.matrix, self.tmp / "report.html", self.verdict)
        files = files_under(self.tmp)  # without the temp directory's own marker
        return PortResult(self.framework, self.hw, outcome.status, outcome.reason, self.out_dir, files,
                          self.timer.timings, self.report, self.verdict, oracle)

    # ------------------------------------------------------------------- early reference runs

    def _start_reference_runs(self, shared, original, model, idle_core: bool = True):
        """The reference outputs are computed while legalize and export run (a worker thread;
        onnxruntime uses the core the Python stages leave idle).  Not for big models: their extra
        session would raise the peak memory.  Not when the port quantizes (``idle_core`` False):
        calibration and the held-out runs keep every core busy, the early runs only slowed them
        (ResNet-18 at 224x224, 100 samples: calibration 11.0 -> 7.7 s, the port 30.1 -> 28.7 s) and
        the verification work landed in the quantize stage's time.  Returns the samples started
        (or None)."""
        if not idle_core or not self.request.verifies or self.timer.heavy or shared is None:
            return None
        from .verification import start_reference_runs

        return start_reference_runs(shared, model, self.request.verify)

    def _legalized_runner(self, shared, model, final, early_samples):
        if shared is None or not self.request.verifies or not self.ok:
            return None
        if final is model:  # legalizing changed nothing: the normalized model's outputs
            return shared.normalized
        if early_samples is not None:
            from .verification import prefetch_legalized

            return prefetch_legalized(shared, final, early_samples)
        return None


def model_name(model_path: str | None) -> str:
    """The exported files' stem: the model file's name up to its first dot, as an identifier."""
    stem = Path(model_path).name.split(".")[0] if model_path else ""
    return re.sub(r"[^A-Za-z0-9_]", "_", stem or "model")


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def _bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (a CoreML .mlpackage)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _warn(line: str) -> None:
    import sys

    print(f"edgeconv: warning: {line}", file=sys.stderr)


def _histogram(model) -> dict[str, int]:
    from ..ir.graph import op_histogram

    return op_histogram(model)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))
