"""Quantization inside ``port``: the one call ``pipeline.py`` makes between legalize and export.

``plan_for_port`` runs before anything is written (a missing calibration set on 8-bit-only
hardware is one BadInput line and no output); ``quantize_for_port`` then loads and checks the
calibration data, calibrates, quantizes (``auto``: mixed precision), compares the quantized model
with the float one output by output, builds the per-layer table, and writes

* ``quantized.onnx`` — the QDQ (or float16) model, ``float.onnx`` — its float reference,
* ``quantization.json`` — the per-tensor scales and zero points (:mod:`.params`; what the native
  int8 exporters read), the per-layer table and the auto decisions,
* ``preproc/`` — ``preprocess.py`` + ``preprocess.hpp`` + ``manifest.json`` when
  ``--preprocess`` is given.

``QuantResult.port_status`` turns the outcome into the port's status: a quantized model beyond
its ``min_sqnr_db`` is ``verify_failed``; a mode the target cannot export natively yet is
``unsupported`` (the exported file is the float model; no fake-quantized float graph is ever
passed off as an integer model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np
import onnx

from ..infra.fsutil import atomic_write_text
from ..verify.spec import VerifySpec
from .modes import QuantPlan, QuantRequest, plan_quantization

def plan_for_port(request: QuantRequest, matrix, framework: str, hw: str, given: str | None = None,
                  target=None) -> QuantPlan | None:
    """The quantization this port does (None: none); bad options are one BadInput line.
    ``given``: the type a quantized input came in (:func:`.given.given_dtype`); ``target``: the
    :class:`~converter.targets.base.Target` (whether its integer file may keep layers float)."""
    plan = plan_quantization(request, matrix.properties(framework, hw).get("dtypes"), framework, hw, given)
    if plan is not None and plan.float_allowed and target is not None and not target.keeps_float_layers(plan.mode):
        from dataclasses import replace

        plan = replace(plan, float_allowed=False)
    return plan


def native_export(target, plan: QuantPlan) -> bool:
    """Does ``target`` write ``plan``'s mode itself (``Target.quantized_modes``)?"""
    return plan.mode in target.quantized_modes


@dataclass
class QuantResult:
    plan: QuantPlan
    model: onnx.ModelProto
    params: dict
    verification: Any
    table: Any = None
    decisions: list = field(default_factory=list)
    calibration: dict | None = None
    warnings: list[str] = field(default_factory=list)
    preprocess: dict | None = None
    native: bool = False
    target: str = ""
    files: list[str] = field(default_factory=list)
    #: ``(target, artifact) -> QuantVerification``: the exported integer file, run by its
    #: runtime, against the float model on the same evaluation samples (set by quantize_for_port).
    evaluate_file: Callable | None = None
    #: That judgement once the pipeline ran it (None: not run), and what ran the file.
    file_verification: Any = None
    file_runtime: str = ""
    #: Per layer, the file against its QDQ model (:mod:`.file_layers`), or None.
    file_layers: dict | None = None
    #: The model the target exports: for an integer file, the legalized model with the biases
    #: bias correction changed (:func:`.bias_correction.with_corrected_biases`); else the model.
    export_model: onnx.ModelProto | None = None
    #: Which samples calibrated and which judged (:meth:`.holdout.QuantSamples.to_dict`).
    samples: dict | None = None
    #: The first held-out sample: what the exported file's latency is measured on.
    first_held: dict | None = field(default=None, repr=False)
    #: Bytes of the exported file(s), and their latency in the framework's runtime
    #: (``Target.latency``), set by the pipeline after the export.
    file_bytes: int | None = None
    file_latency: dict | None = None

    @property
    def native_integer(self) -> bool:
        """The target writes the integer model itself (int8/uint8 tensors or int8 weights, not a
        float file): judged by SQNR against the float model, not by the float tolerances."""
        return self.native and self.plan.mode in ("int8", "uint8", "int8-weights")

    def export_spec(self) -> dict:
        """What an integer exporter reads (``ExportOptions.extra["quantization"]``)."""
        return {"mode": self.plan.mode, "params": self.params, "full_integer": self.plan.full_integer}

    @property
    def export_fp16(self) -> bool:
        """Export with float16 weights (the native form of ``--quantize fp16``)."""
        return self.native and self.plan.mode == "fp16"

    def port_status(self, status: str, reason: str) -> tuple[str, str]:
        if status != "ok":
            return status, reason
        if not self.verification.ok:
            return "verify_failed", self.verification.summary() + (f"; {self.table.summary()}" if self.table else "")
        if self.file_verification is not None and not self.file_verification.ok:
            return "verify_failed", f"{self.target} file: {self.file_verification.summary()}"
        if not self.native:
            return "unsupported", (f"native {self.plan.mode} export for {self.target} not implemented yet: "
                                   "quantized.onnx holds the QDQ model, the exported file is the float model")
        return status, reason

    def to_json(self) -> dict:
        """JSON-ready (non-finite numbers as "inf"/"-inf"/"nan" strings, as in verify.json)."""
        from ..verify.report import json_safe

        return json_safe({
            "plan": self.plan.to_dict(),
            "native_export": self.native,
            "calibration": self.calibration,
            "warnings": self.warnings,
            "verification": self.verification.to_dict(),
            # the exported integer file run by its runtime (LiteRT, ...) against the float model
            "file_verification": None if self.file_verification is None else {
                **self.file_verification.to_dict(), "runtime": self.file_runtime},
            "file_layers": self.file_layers,
            "layers": self.table.to_dict() if self.table is not None else None,
            "auto_decisions": [d.to_dict() for d in self.decisions],
            "float_nodes": self.params.get("float_nodes", []),
            "bias_correction": self.params.get("bias_correction"),
            "inputs": self.params.get("inputs"),
            "outputs": self.params.get("outputs"),
            "preprocess": self.preprocess,
            "samples": self.samples,
            "file_bytes": self.file_bytes,
            "file_latency": self.file_latency,
            "files": self.files,
        })


def quantize_for_port(model: onnx.ModelProto, request: QuantRequest, verify: VerifySpec | None, plan: QuantPlan,
                      target, out_dir: Path, postprocess: Callable | None = None,
                      warn: Callable[[str], None] | None = None, hw: str = "") -> QuantResult:
    """Quantize the legalized (cut) float ``model`` as ``plan`` says for ``target`` on ``hw``
    (default: the target's own); write the files into ``out_dir``.  ``verify``: the port's
    verification options (``--inputs`` are the held-out evaluation samples)."""
    from ..verify.stages import load_tolerances
    from .bias_correction import with_corrected_biases
    from .judge import Judge
    from .port_data import read_port_data

    verify = verify or VerifySpec()
    data = read_port_data(model, request, verify, plan, out_dir)
    config, own_weights = quant_config(plan, target, hw)
    start = calibrate(model, plan, config, data.samples.calibrate)
    if start.given is not None:
        data.warnings += start.given.warnings
    judge = Judge(model, data.samples, load_tolerances(verify.tolerances), plan.mode, postprocess)
    outcome = quantize_and_judge(model, plan, start, data.samples.calibrate, judge)
    params = record_params(model, outcome, plan, start, target, own_weights)
    result = QuantResult(plan, outcome.model, params, outcome.quality, outcome.table, outcome.decisions,
                         data.calibration, data.warnings, data.preprocess, native_export(target, plan), target.name,
                         samples=data.samples.to_dict(), first_held=(data.samples.held or [None])[0])
    # a float file (fp16, or no native integer export) keeps the model's own biases
    result.export_model = with_corrected_biases(model, outcome.model) if result.native_integer else model
    write_quant_files(out_dir, model, result)
    result.evaluate_file = file_evaluator(result, model, judge, postprocess)
    result.files = ["quantized.onnx", "float.onnx", "quantization.json"] + (data.preprocess or {}).get("files", [])
    for line in data.warnings:
        if warn is not None:
            warn(line)
    return result


def quant_config(plan: QuantPlan, target, hw: str):
    """(the :class:`.qdq.QuantConfig` for ``target`` on ``hw``, whether the target writes weight
    integers of its own scheme, which a bias correction of the QDQ model's would not fit).

    A target that quantizes the float weights itself either hands its integers to the QDQ model
    (MACE's CPU: target_weights.py) or writes other ones (TNN of per-tensor QDQ weights, MACE's
    DSP): a correction fitted to the QDQ model's weight errors would be noise for the latter."""
    from .qdq import QuantConfig

    integer_file = native_export(target, plan) and plan.mode in ("int8", "uint8")
    weight_integers = target.weight_integers(plan.mode, hw or target.default_hw) if integer_file else None
    own_weights = integer_file and weight_integers is None and not target.carries_qdq_weight_integers(plan.per_channel)
    config = QuantConfig(plan.mode, per_channel=plan.per_channel, method=plan.method, full_integer=plan.full_integer,
                         bias_correction=plan.bias_correction and not own_weights, weight_integers=weight_integers)
    return config, own_weights


@dataclass
class Calibrated:
    """What quantizing starts from: the config, the activation ranges, the calibration pass's
    float statistics (bias correction's), and for a quantized input its :class:`.given.GivenSetup`."""

    config: Any
    ranges: Any = None
    stats: Any = None
    given: Any = None


def calibrate(model: onnx.ModelProto, plan: QuantPlan, config, samples: list[dict]) -> Calibrated:
    """Ranges and float statistics from the calibration ``samples``; a quantized input
    (``plan.given``) takes its own scales and zero points instead (``samples`` only range the
    tensors it left without any); a mode that calibrates nothing, neither."""
    if plan.given:  # the input's own scales and zero points (hook: converter/quantize/given.py)
        from .given import given_record, given_setup

        given = given_setup(model, config, given_record(model), samples or None)
        return Calibrated(given.config, given.ranges, None, given)
    if not plan.needs_calibration:
        return Calibrated(config)
    from .float_pass import FloatStats
    from .ranges import collect_ranges

    stats = FloatStats()  # minmax calibration takes bias correction's float statistics too
    return Calibrated(config, collect_ranges(model, samples, plan.method, stats=stats), stats)


@dataclass
class Quantized:
    """What :func:`quantize_and_judge` chose: the model, its verdict, per-layer table, decisions."""

    config: Any
    model: onnx.ModelProto
    quality: Any
    table: Any
    decisions: list = field(default_factory=list)


def quantize_and_judge(model: onnx.ModelProto, plan: QuantPlan, start: Calibrated, calibration: list[dict],
                       judge) -> Quantized:
    """The quantized model (``auto``: mixed precision) with its verdict and per-layer table, every
    choice made on ``judge``'s held-out samples.  A quantized input's own parameters are used as
    they are: no ``auto`` search, no bias correction, no keep-float measurements."""
    from .debug import debug_layers
    from .qdq import quantize_model

    config, ranges, stats = start.config, start.ranges, start.stats
    calibrated = plan.needs_calibration and not plan.given
    score = judge.scorer()
    if plan.auto and calibrated:
        from .auto import auto_quantize

        auto = auto_quantize(model, config, ranges, calibration, judge, plan.float_allowed, stats, score)
        return Quantized(auto.config, auto.model, auto.quality, auto.table, auto.decisions)
    quantized = quantize_model(model, config, ranges, calibration or None, stats, score)
    quality = judge.verification(quantized)
    judge.release(quantized)
    table = debug_layers(model, quantized, judge.held, plan.mode)
    if calibrated:
        from .recovery import measure_model

        for variant in measure_model(model, table, quantized, config, ranges, calibration, stats, judge):
            judge.forget(variant.model)  # measured: it will not run again
    return Quantized(config, quantized, quality, table)


def record_params(model: onnx.ModelProto, outcome: Quantized, plan: QuantPlan, start: Calibrated, target,
                  own_weights: bool) -> dict:
    """The per-tensor scales and zero points (:mod:`.params`), with what the port decided."""
    from .params import QdqView, quant_params

    params = quant_params(QdqView(model, outcome.model), outcome.config)
    if start.given is not None:
        from .given import given_record

        params["given"] = start.given.record(given_record(model))
    if plan.bias_correction and own_weights and plan.needs_calibration:
        params["bias_correction"] = {"applied": False, "layers": 0, "why": (
            f"the {target.title} file quantizes the weights with {target.title}'s own scheme, so a correction "
            "for the QDQ model's weight rounding would not hold for it")}
    if plan.full_integer and start.ranges is not None:
        params["calibrated"] = calibrated_params(start.ranges, params, plan.mode)
    return params


def write_quant_files(out_dir: Path, model: onnx.ModelProto, result: QuantResult) -> None:
    """``quantized.onnx``, ``float.onnx`` and ``quantization.json``."""
    from ..ir.onnx_file import save_onnx
    from ..verify.report import json_safe

    save_onnx(result.model, out_dir / "quantized.onnx")
    save_onnx(model, out_dir / "float.onnx")
    record = json_safe({"params": result.params, "layers": result.table.to_dict() if result.table else None,
                        "auto_decisions": [d.to_dict() for d in result.decisions], "samples": result.samples,
                        "verification": result.verification.to_dict()})
    atomic_write_text(out_dir / "quantization.json", json.dumps(record, indent=2, sort_keys=True, allow_nan=False) + "\n")


def file_evaluator(result: QuantResult, model: onnx.ModelProto, judge, postprocess: Callable | None):
    """``evaluate_file(target, artifact)``: the exported integer file, run by its runtime, against
    the float model on the held-out samples (and per layer against its QDQ model)."""
    from .verify import compare_quantized

    def evaluate_file(target_, artifact):
        from ..errors import EdgeconvError
        from ..verify.stages import compose, target_runner
        from .file_layers import file_layers

        result.file_runtime = artifact.runtime
        by_id = {id(s): k for k, s in enumerate(judge.held)}
        # a reader that cannot run the file (an op it does not model) leaves it unverified
        quality = compare_quantized(lambda s: judge.reference(by_id[id(s)]),
                                    compose(target_runner(target_, artifact), postprocess or (lambda o: o)),
                                    judge.held, judge.tolerances, result.plan.mode)
        quality.samples_from = judge.label
        try:
            result.file_layers = file_layers(model, result.model, target_, artifact, judge.held)
        except EdgeconvError:  # a reader/runtime that cannot expose tensors: outputs are judged anyway
            result.file_layers = None
        return quality

    return evaluate_file


def remembered(runner: Callable) -> Callable:
    """``runner`` computing each sample (by identity: the evaluation list's own dicts) once."""
    outputs: dict[int, dict] = {}

    def run(sample):
        if id(sample) not in outputs:
            outputs[id(sample)] = runner(sample)
        return outputs[id(sample)]

    return run


def calibrated_params(ranges, params: dict, mode: str) -> dict:
    """Scale/zero point from the calibrated range of every tensor the QDQ model left float.

    onnxruntime quantizes only the ops it has QDQ rules for (not Sub or ReduceMax, for
    instance); on 8-bit-only hardware those run in integers too, so a full-integer exporter needs
    their parameters: onnxruntime's ``compute_scale_zp`` over the same calibrated range (0
    included), keyed like ``activations``."""
    from onnxruntime.quantization.quant_utils import QuantType, compute_scale_zp, get_qmin_qmax_for_qType

    qtype = QuantType.QInt8 if mode == "int8" else QuantType.QUInt8
    qmin, qmax = get_qmin_qmax_for_qType(qtype.tensor_type)
    out = {}
    for name, td in sorted(ranges.data.items()):
        if name in params["activations"]:
            continue
        low, high = (float(v) for v in td.range_value)
        zp, scale = compute_scale_zp(np.array(min(low, 0.0), np.float32), np.array(max(high, 0.0), np.float32),
                                     qmin, qmax)
        out[name] = {"dtype": mode, "scale": [float(scale)], "zero_point": [int(zp)], "axis": None}
    return out
