"""Compare every stage of a port against the original model, output by output.

A stage is a name and a runner, ``runner(inputs) -> {output name: array}``: the normalized and
legalized ONNX graphs run in onnxruntime (:func:`~converter.runtimes.onnxruntime.onnx_runner`), a cut
model followed by its generated post-processing is ``compose(onnx_runner(cut), postprocess)``, and
a target file runs through ``TARGET.run(artifact, inputs)`` (:func:`target_runner`).  A stage that
also carries its ONNX ``model`` is localized when it fails: see :mod:`converter.verify.localize`;
a target stage with a ``localizer`` (the target implements ``intermediates``) is localized inside
the exported file: see :mod:`converter.verify.target_layers`.

Tolerance profile (YAML; every key optional; per-output entries inherit what they leave out)::

    atol: 1.0e-4          # |got - ref| <= atol + rtol * |ref|, element-wise
    rtol: 1.0e-3
    layer_rmse: 1.0e-3    # per-layer normalized rMSE above which a layer is diverging
    noise_multiple: 16    # an output beyond atol/rtol still passes within this many times its
                          # float32 noise floor (max abs and normalized rMSE); 0 turns it off
    min_sqnr_db: 25       # quantized vs float model: least SQNR per output (default by mode, see below)
    outputs:
      scores: {atol: 1.0e-3}
      boxes:  {atol: 1.0e-2, rtol: 1.0e-2, min_sqnr_db: 20}

The noise floor (:mod:`converter.verify.noise`) is estimated only when some output misses
``atol``/``rtol``; each output's result then reports both verdicts and which one decided.

``min_sqnr_db`` judges a quantized model (``--quantize``) against its float original; when the
profile does not set it, :data:`DEFAULT_MIN_SQNR_DB` gives one per quantization mode.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from ..errors import BadInput, RuntimeUnavailable, TimedOut
from . import metrics
from .localize import DEFAULT_LAYER_TOL, LayerReport, localize
from .metrics import Metrics, Tolerance
from .noise import DEFAULT_MULTIPLE as DEFAULT_NOISE_MULTIPLE
from .noise import NoiseFloor
from ..runtimes.base import Runner
from ..runtimes.onnxruntime import one_line, onnx_runner

PASS, FAIL, ERROR, SKIPPED = "pass", "fail", "error", "skipped"
#: A target stage whose built-in reader could not run the file: neither passed nor failed.
UNVERIFIED = "unverified"


# ------------------------------------------------------------------------------- tolerances


#: Least SQNR (dB) of each output of a quantized model against its float original, by mode:
#: 8-bit with 25 dB keeps classifiers' top-1 (about 5.6% RMS error); float16 should be far closer.
DEFAULT_MIN_SQNR_DB = {"int8": 25.0, "uint8": 25.0, "int8-weights": 30.0, "fp16": 50.0}


@dataclass(frozen=True)
class Tolerances:
    default: Tolerance = Tolerance()
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    layer_rmse: float = DEFAULT_LAYER_TOL
    #: Profile-wide ``min_sqnr_db`` (None: by mode), and per output.
    min_sqnr_db: float | None = None
    output_min_sqnr_db: dict[str, float] = field(default_factory=dict)
    #: An output beyond atol/rtol passes within this multiple of its float32 noise floor (0: off).
    noise_multiple: float = DEFAULT_NOISE_MULTIPLE

    def for_output(self, name: str) -> Tolerance:
        return self.outputs.get(name, self.default)

    def sqnr_for_output(self, name: str, mode: str) -> float:
        """The least SQNR a quantized model's output ``name`` must reach (mode: --quantize's)."""
        if name in self.output_min_sqnr_db:
            return self.output_min_sqnr_db[name]
        return self.min_sqnr_db if self.min_sqnr_db is not None else DEFAULT_MIN_SQNR_DB.get(mode, 25.0)

    def to_dict(self) -> dict:
        out = {
            **self.default.to_dict(), "layer_rmse": self.layer_rmse, "noise_multiple": self.noise_multiple,
            "outputs": {k: v.to_dict() for k, v in sorted(self.outputs.items())},
        }
        if self.min_sqnr_db is not None or self.output_min_sqnr_db:
            out["min_sqnr_db"] = self.min_sqnr_db
            for name, value in self.output_min_sqnr_db.items():
                out["outputs"].setdefault(name, self.for_output(name).to_dict())["min_sqnr_db"] = value
        return out


_MODEL_KEYS = {"atol", "rtol", "layer_rmse", "outputs", "min_sqnr_db", "noise_multiple"}
_OUTPUT_KEYS = {"atol", "rtol", "min_sqnr_db"}


def _number(value, where: str) -> float:
    # PyYAML reads "1e-4" (no dot) as a string: accept any spelling float() accepts.
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise BadInput(f"{where}: expected a finite number >= 0, got {value!r}")
    return number


def load_tolerances(
    path: str | os.PathLike | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    layer_rmse: float | None = None,
) -> Tolerances:
    """Tolerances from a YAML profile and flags.

    Flags override the profile's model-wide values; the profile's per-output entries override
    both for their output (the most specific setting wins).
    """
    data: dict = {}
    where = "tolerances"
    if path is not None:
        import yaml

        where = f"--tolerances {path}"
        p = Path(path)
        if not p.is_file():
            raise BadInput(f"{where}: no such file")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise BadInput(f"{where}: not valid YAML ({one_line(err)})") from None
        if not isinstance(data, dict):
            raise BadInput(f"{where}: expected a mapping with keys {', '.join(sorted(_MODEL_KEYS))}")
        unknown = sorted(set(map(str, data)) - _MODEL_KEYS)
        if unknown:
            raise BadInput(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_MODEL_KEYS))}")
    base = Tolerance()
    default = Tolerance(
        atol=_number(atol, "--atol") if atol is not None else _number(data.get("atol", base.atol), f"{where}: atol"),
        rtol=_number(rtol, "--rtol") if rtol is not None else _number(data.get("rtol", base.rtol), f"{where}: rtol"),
    )
    layer = (_number(layer_rmse, "--layer-tol") if layer_rmse is not None
             else _number(data.get("layer_rmse", DEFAULT_LAYER_TOL), f"{where}: layer_rmse"))
    outputs: dict[str, Tolerance] = {}
    sqnr_outputs: dict[str, float] = {}
    min_sqnr = data.get("min_sqnr_db")
    min_sqnr = None if min_sqnr is None else _number(min_sqnr, f"{where}: min_sqnr_db")
    per_output = data.get("outputs") or {}
    if not isinstance(per_output, dict):
        raise BadInput(f"{where}: 'outputs' must map output names to {{atol, rtol}}")
    for name, entry in per_output.items():
        if not isinstance(entry, dict):
            raise BadInput(f"{where}: outputs.{name} must be a mapping like {{atol: 1.0e-3}}")
        unknown = sorted(set(map(str, entry)) - _OUTPUT_KEYS)
        if unknown:
            raise BadInput(f"{where}: outputs.{name}: unknown key(s) {', '.join(unknown)}; "
                           f"allowed: {', '.join(sorted(_OUTPUT_KEYS))}")
        if "min_sqnr_db" in entry:
            sqnr_outputs[str(name)] = _number(entry["min_sqnr_db"], f"{where}: outputs.{name}.min_sqnr_db")
        if "atol" in entry or "rtol" in entry or "min_sqnr_db" not in entry:
            outputs[str(name)] = Tolerance(
                atol=_number(entry.get("atol", default.atol), f"{where}: outputs.{name}.atol"),
                rtol=_number(entry.get("rtol", default.rtol), f"{where}: outputs.{name}.rtol"),
            )
    noise = _number(data.get("noise_multiple", DEFAULT_NOISE_MULTIPLE), f"{where}: noise_multiple")
    return Tolerances(default=default, outputs=outputs, layer_rmse=layer, min_sqnr_db=min_sqnr,
                      output_min_sqnr_db=sqnr_outputs, noise_multiple=noise)


# ----------------------------------------------------------------------------------- stages


@dataclass
class Stage:
    name: str
    run: Runner
    #: The stage's ONNX graph, when it has one: enables per-layer localization on failure.
    model: onnx.ModelProto | None = None
    #: The graph the stage's tensor names and provenance refer to (default: the original), or a
    #: zero-argument function returning it (called only when the stage fails).
    reference: onnx.ModelProto | Callable[[], onnx.ModelProto] | None = None
    #: This stage's own tolerances (e.g. an fp16 target's), instead of the report-wide ones.
    tolerances: Tolerances | None = None
    #: For stages without an ONNX ``model``: ``localizer(sample, layer_tolerance) -> LayerReport``
    #: (e.g. :class:`~converter.verify.target_layers.TargetLocalizer`), called when it fails.
    localizer: Callable[[dict[str, np.ndarray], float], LayerReport] | None = None
    #: What computes this stage's numbers (:class:`converter.runtimes.Oracle`); ONNX stages:
    #: onnxruntime.
    oracle: Any = None


def compose(runner: Runner, postprocess: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> Runner:
    """Run ``postprocess`` (generated post-processing) on the outputs of ``runner`` (cut model)."""
    return lambda inputs: postprocess(runner(inputs))


def target_runner(target, artifact) -> Runner:
    """The runner of an exported artifact on its target's executor, or a real runtime bound
    with :func:`converter.targets.oracles.bind` (:class:`~converter.runtimes.base.TargetRunner`)."""
    from ..targets.oracles import runner_of

    return runner_of(target, artifact)


StageLike = Stage | tuple


def _as_stage(stage: StageLike) -> Stage:
    if isinstance(stage, Stage):
        return stage
    name, runner, *rest = stage
    return Stage(name, runner, *rest)


# ---------------------------------------------------------------------------------- results


@dataclass
class OutputResult:
    name: str
    #: The stage's output compared with ``name`` (differs when matched by position).
    candidate: str | None
    tolerance: Tolerance
    metrics: Metrics | None
    passed: bool
    reason: str = ""
    #: The output's float32 noise floor, when it was estimated (an output missed atol/rtol).
    noise_floor: NoiseFloor | None = None
    noise_multiple: float | None = None
    #: What decided: "atol/rtol", or "noise floor" (beyond atol/rtol, within the floor's multiple).
    judged_by: str = "atol/rtol"

    def to_dict(self) -> dict:
        return {
            "name": self.name, "candidate": self.candidate, "tolerance": self.tolerance.to_dict(),
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "passed": self.passed, "reason": self.reason, "judged_by": self.judged_by,
            "noise_floor": self.noise_floor.to_dict() if self.noise_floor else None,
            "noise_multiple": self.noise_multiple,
        }


@dataclass
class StageResult:
    name: str
    status: str
    outputs: list[OutputResult] = field(default_factory=list)
    reason: str = ""
    layers: LayerReport | None = None
    #: Index of the sample localization ran on (the one with the largest error).
    worst_sample: int | None = None
    #: What computed the stage's numbers (``{"name", "kind"}``), e.g. "TNN x86 runtime (tnn_run)".
    oracle: dict | None = None

    @property
    def failed(self) -> bool:
        return self.status in (FAIL, ERROR)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "status": self.status, "reason": self.reason, "oracle": self.oracle,
            "outputs": [o.to_dict() for o in self.outputs],
            "worst_sample": self.worst_sample,
            "layers": self.layers.to_dict() if self.layers else None,
        }


@dataclass
class VerifyReport:
    stages: list[StageResult]
    tolerances: Tolerances
    #: The samples every stage ran on (what a replay file holds).
    inputs: list[dict[str, np.ndarray]]
    #: Where the inputs came from: "seed 0, uniform [-1, 1]" or "calibration data.npz".
    input_source: str = ""
    #: Filled by :func:`converter.verify.replay.write_replay`.
    replay: dict | None = None

    @property
    def ok(self) -> bool:
        return not any(s.failed for s in self.stages)

    @property
    def first_failure(self) -> StageResult | None:
        return next((s for s in self.stages if s.failed), None)

    @property
    def unverified(self) -> StageResult | None:
        """The first stage no oracle could judge (a reader that cannot run the file)."""
        return next((s for s in self.stages if s.status == UNVERIFIED), None)

    @property
    def target_oracle(self) -> str | None:
        """The name of the oracle that judged the target stage, if there is one."""
        stage = next((s for s in self.stages if s.name.startswith("target:")), None)
        return (stage.oracle or {}).get("name") if stage is not None else None

    def summary(self) -> str:
        failed = self.first_failure
        if failed is None:
            ran = [_named(s) for s in self.stages if s.status == PASS]
            text = f"verification passed: {', '.join(ran) or 'no stage'} match the original"
            unverified = self.unverified
            return text + (f"; {unverified.reason}" if unverified is not None else "")
        detail = failed.reason or next((o.reason for o in failed.outputs if not o.passed), "")
        text = f"stage '{_named(failed)}' differs from the original: {detail}"
        if failed.layers is not None and (failed.layers.first is not None or failed.layers.error):
            text += f"; {failed.layers.summary()}"
        return text

    def to_dict(self) -> dict:
        from ..runtimes import onnxruntime_oracle

        return {
            "ok": self.ok, "summary": self.summary(), "samples": len(self.inputs),
            "reference_oracle": onnxruntime_oracle().to_dict(), "target_oracle": self.target_oracle,
            "unverified": self.unverified is not None,
            "input_source": self.input_source, "tolerances": self.tolerances.to_dict(),
            "stages": [s.to_dict() for s in self.stages], "replay": self.replay,
        }


def _named(stage: StageResult) -> str:
    """A stage as verdicts name it: target stages with their oracle."""
    oracle = (stage.oracle or {}).get("name")
    return f"{stage.name} ({oracle})" if oracle and stage.name.startswith("target:") else stage.name


# ------------------------------------------------------------------------------- comparison


def _match_outputs(ref_names: list[str], got: dict[str, np.ndarray]) -> dict[str, str | None]:
    """Reference output -> stage output.  By name; by position when no name matches at all
    (runtimes such as LiteRT rename outputs) and the counts agree."""
    if any(n in got for n in ref_names) or len(got) != len(ref_names):
        return {n: (n if n in got else None) for n in ref_names}
    return dict(zip(ref_names, got))


def _compare_output(name: str, cand: str | None, refs: list[np.ndarray], gots: list[dict], tol: Tolerance,
                    noise: Callable[[], dict[str, NoiseFloor]] | None = None, multiple: float = 0.0) -> OutputResult:
    if cand is None:
        return OutputResult(name, None, tol, None, False, f"output '{name}' is missing")
    per_sample = []
    for k, (ref, got) in enumerate(zip(refs, gots)):
        if cand not in got:
            return OutputResult(name, cand, tol, None, False, f"output '{name}' is missing for sample {k}")
        value = np.asarray(got[cand])
        if value.shape != ref.shape:
            if value.size == ref.size and tuple(d for d in value.shape if d != 1) == tuple(d for d in ref.shape if d != 1):
                value = value.reshape(ref.shape)
            else:
                return OutputResult(name, cand, tol, None, False,
                                    f"output '{name}' has shape {list(value.shape)}, expected {list(ref.shape)}")
        per_sample.append(metrics.compare(ref, value, tol))
    worst = metrics.worst(per_sample)
    passed = worst.mismatched == 0
    reason = "" if passed else (
        f"output '{name}': {worst.mismatched}/{worst.size} elements beyond atol {tol.atol:g} + rtol {tol.rtol:g}"
        f" (max abs {worst.max_abs:.3g}, max rel {worst.max_rel:.3g})")
    result = OutputResult(name, cand, tol, worst, passed, reason)
    if not passed and noise is not None and multiple > 0:
        floor = noise().get(name)
        if floor is not None:
            result.noise_floor, result.noise_multiple = floor, multiple
            rmse = max(metrics.normalized_rmse(r, np.reshape(g[cand], np.shape(r))) for r, g in zip(refs, gots))
            within = (math.isfinite(floor.max_abs) and math.isfinite(floor.normalized_rmse)
                      and worst.max_abs <= multiple * floor.max_abs and rmse <= multiple * floor.normalized_rmse)
            if within:
                result.passed, result.judged_by = True, "noise floor"
                result.reason = (f"{reason}, but within {multiple:g}x the output's float32 noise floor "
                                 f"(max abs {floor.max_abs:.3g}, normalized rMSE {floor.normalized_rmse:.3g})")
            else:
                result.reason = (f"{reason}; also beyond {multiple:g}x the float32 noise floor (max abs "
                                 f"{floor.max_abs:.3g}, normalized rMSE {floor.normalized_rmse:.3g}; got "
                                 f"normalized rMSE {rmse:.3g})")
    return result


def _output_rmse(ref: dict, got: dict, matched: dict[str, str | None]) -> float:
    """The largest normalized rMSE over the outputs of one sample."""
    score = 0.0
    for name, cand in matched.items():
        if cand is not None and np.size(got[cand]) == np.size(ref[name]):
            score = max(score, metrics.normalized_rmse(ref[name], np.reshape(got[cand], np.shape(ref[name]))))
    return score


def _worst_sample(ref_outs: list[dict], got_outs: list[dict], matched: dict[str, str | None]) -> int:
    scores = [_output_rmse(ref, got, matched) for ref, got in zip(ref_outs, got_outs)]
    return int(np.argmax(scores)) if scores else 0


def _localization_note(layers: LayerReport) -> str:
    if layers.error is not None or layers.first is not None:
        return ""  # the layer report's own summary says it
    if layers.target:
        if not layers.layers:
            return f"; the {layers.target} file exposes no tensor that maps to the legalized model"
        return (f"; all {len(layers.layers)} compared tensors of the {layers.target} file are within normalized "
                f"rMSE {layers.tolerance:g} of the legalized model: the error arises in tensors the file does "
                "not expose or after them (output conversion, post-processing)")
    if not layers.layers:
        return "; no intermediate tensor of its graph maps to the reference (no shared names or provenance)"
    return (f"; all {len(layers.layers)} compared layers of its ONNX graph are within normalized rMSE "
            f"{layers.tolerance:g}: the error arises after them (post-processing or runtime)")


def _release(runner) -> None:
    """Let an onnxruntime runner free its session (and the weights it holds) once done."""
    release = getattr(runner, "release", None)
    if callable(release):
        release()


def verify_stages(
    original: onnx.ModelProto | str | os.PathLike | Runner,
    stages: Sequence[StageLike],
    inputs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
    tolerances: Tolerances | None = None,
    localize_failures: bool = True,
    input_source: str = "",
    noise_model: onnx.ModelProto | None = None,
) -> VerifyReport:
    """Run ``original`` and every stage on ``inputs`` and compare each stage with the original.
    ``noise_model``: the ONNX model whose float32 noise floor is estimated when ``original`` is a
    runner (default: ``original`` itself when it is a model)."""
    tolerances = tolerances or Tolerances()
    samples = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not samples:
        raise BadInput("verification needs at least one input sample")
    reference = _Reference.run(original, samples)
    ref_names = list(reference.outputs[0])
    unknown = sorted((set(tolerances.outputs) | set(tolerances.output_min_sqnr_db)) - set(ref_names))
    if unknown:
        raise BadInput(f"tolerances name output(s) {', '.join(unknown)}, but the model's outputs are: {', '.join(ref_names)}")

    noise = _NoiseFloors(reference.model if reference.model is not None else noise_model, reference)
    results = [_verify_stage(stage, reference, tolerances, noise, localize_failures) for stage in map(_as_stage, stages)]
    return VerifyReport(results, tolerances, samples, input_source)


@dataclass
class _Reference:
    """The original's outputs on every sample, and the original when it is an ONNX model."""

    model: onnx.ModelProto | None
    samples: list[dict[str, np.ndarray]]
    outputs: list[dict[str, np.ndarray]]

    @classmethod
    def run(cls, original, samples: list[dict[str, np.ndarray]]) -> _Reference:
        if isinstance(original, (str, os.PathLike)):
            original = onnx.load(str(original))
        reference_model = original if isinstance(original, onnx.ModelProto) else None
        run_original = onnx_runner(original) if reference_model is not None else original
        ref_outs = [run_original(s) for s in samples]  # a broken original is a BadInput, not a stage
        _release(run_original)
        return cls(reference_model, samples, ref_outs)


class _NoiseFloors:
    """The reference's float32 noise floor per output (of ``model``), estimated once, when first
    needed (called)."""

    def __init__(self, model: onnx.ModelProto | None, reference: _Reference):
        self.model, self.reference = model, reference
        self.floors: dict | None = None

    def __call__(self) -> dict:
        from .noise import estimate

        if self.floors is None:
            try:
                self.floors = estimate(self.model, self.reference.samples, self.reference.outputs) \
                    if self.model is not None else {}
            except Exception:  # noqa: BLE001 - no estimate: atol/rtol alone decide
                self.floors = {}
        return self.floors


def _verify_stage(stage: Stage, reference: _Reference, tolerances: Tolerances, noise: _NoiseFloors,
                  localize_failures: bool) -> StageResult:
    """Run ``stage`` on the samples and compare it with the reference, output by output; a failed
    stage is localized (when asked and it can be)."""
    from ..runtimes import ReaderCannotRun, onnxruntime_oracle

    oracle = stage.oracle if stage.oracle is not None else onnxruntime_oracle()
    oracle = oracle.to_dict() if hasattr(oracle, "to_dict") else oracle
    try:
        got_outs = [stage.run(s) for s in reference.samples]
        _release(stage.run)
    except TimedOut:
        raise  # past --timeout: the whole run stops (exit 9), it is no verdict on the file
    except RuntimeUnavailable as err:
        return StageResult(stage.name, SKIPPED, reason=str(err), oracle=oracle)
    except ReaderCannotRun as err:
        return StageResult(stage.name, UNVERIFIED, reason=str(err), oracle=oracle)
    except Exception as err:  # noqa: BLE001 - a stage that cannot run is a failed stage
        return StageResult(stage.name, ERROR, reason=f"could not run: {one_line(err)}", oracle=oracle)
    ref_names = list(reference.outputs[0])
    matched = _match_outputs(ref_names, got_outs[0])
    stage_tol = stage.tolerances or tolerances
    outputs = [
        _compare_output(n, matched[n], [r[n] for r in reference.outputs], got_outs, stage_tol.for_output(n),
                        noise, stage_tol.noise_multiple)
        for n in ref_names
    ]
    status = PASS if all(o.passed for o in outputs) else FAIL
    result = StageResult(stage.name, status, outputs, oracle=oracle)
    if status == FAIL:
        result.reason = next(o.reason for o in outputs if not o.passed)
        result.worst_sample = worst = _worst_sample(reference.outputs, got_outs, matched)
        layers = _failure_layers(stage, reference, worst, tolerances.layer_rmse, stage_tol.layer_rmse) \
            if localize_failures else None
        if layers is not None:
            _attach_layers(result, layers, _output_rmse(reference.outputs[worst], got_outs[worst], matched))
    return result


def _failure_layers(stage: Stage, reference: _Reference, worst: int, layer_rmse: float,
                    stage_layer_rmse: float) -> LayerReport | None:
    """Where a failed stage diverges, on its worst sample: its ONNX graph against the reference
    model (``layer_rmse``), or the target file's own tensors (``stage_layer_rmse``); None when
    neither can be compared."""
    if stage.model is not None:
        model = stage.reference if stage.reference is not None else reference.model
        if callable(model):
            model = model()
        if model is None:
            return None
        return localize(model, stage.model, reference.samples[worst], tolerance=layer_rmse)
    if stage.localizer is not None:
        return stage.localizer(reference.samples[worst], stage_layer_rmse)
    return None


def _attach_layers(result: StageResult, layers: LayerReport, out_rmse: float) -> None:
    """``layers`` become the failed ``result``'s localization; its reason says what they found.
    ``out_rmse``: the outputs' normalized rMSE on the sample the layers were compared on."""
    # Outputs can fail an absolute tolerance finer than the per-layer one: then judge
    # the layers against a tenth of the outputs' own normalized rMSE instead.
    layer_tol = layers.tolerance
    if layers.error is None and layers.first is None and 0 < out_rmse / 10 < layer_tol:
        layers.retolerance(out_rmse / 10)
        if layers.first is not None:
            result.reason += (f"; the outputs' normalized rMSE {out_rmse:.3g} is below the layer "
                              f"tolerance {layer_tol:g}, so layers were judged against "
                              f"{layers.tolerance:.3g}")
    result.layers = layers
    result.reason += _localization_note(layers)
