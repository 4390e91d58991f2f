"""The data a port quantizes with: the ``--preprocess`` spec (and its generated code), the
calibration set, the ``--inputs``, their checks against the spec, and the split into the samples
that calibrate and the held-out ones (:mod:`.holdout`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from .holdout import QuantSamples, split_samples
from .modes import QuantPlan, QuantRequest


@dataclass
class PortData:
    samples: QuantSamples
    #: The calibration record of the report (source, samples read, bytes), or None.
    calibration: dict | None = None
    #: The bound ``--preprocess`` spec and the report's record of it (spec, generated files).
    spec: object = None
    preprocess: dict | None = None
    warnings: list[str] = field(default_factory=list)


def read_port_data(model: onnx.ModelProto, request: QuantRequest, verify, plan: QuantPlan,
                   out_dir: Path) -> PortData:
    """Read, check and split everything a port's quantization reads (``verify``: its
    :class:`~converter.verify.spec.VerifySpec`; ``--inputs`` are the held-out samples)."""
    from ..runtimes.feeds import load_npz, random_inputs

    data = PortData(samples=None)  # type: ignore[arg-type]
    if request.preprocess:
        data.spec, data.preprocess = _preprocess(model, request.preprocess, out_dir)
    calibration = None
    if request.calibration:  # also the evaluation data of fp16 / int8-weights when no --inputs
        from .calibration import load_calibration

        calibration = load_calibration(request.calibration, model, data.spec, seed=verify.seed)
        data.warnings += calibration.warnings
        data.calibration = {"source": calibration.source, "samples": len(calibration.samples),
                            "bytes": calibration.nbytes, "samples_in_source": calibration.total}
    held = load_npz(verify.inputs, model) if verify.inputs else None
    if data.spec is not None:
        data.warnings += _input_warnings(request.calibration, calibration, verify.inputs, held, data.spec)
    fallback = None if held or calibration else random_inputs(model, verify.seed, verify.ranges, samples=8)
    data.samples = split_samples(calibration.samples if calibration else None, held, verify.seed,
                                 f"--inputs {verify.inputs}", fallback, fitted=plan.needs_calibration)
    if data.calibration is not None:
        data.calibration["calibrated_on"] = len(data.samples.calibrate)
    if data.samples.in_sample and plan.needs_calibration and not plan.given:
        data.warnings.append(f"--calibration {request.calibration}: {len(calibration.samples)} samples are too few to "
                             "hold some out: bias correction was chosen and the SQNR measured on the calibration "
                             "samples themselves (give --inputs for held-out numbers)")
    return data


def _preprocess(model: onnx.ModelProto, text: str, out_dir: Path):
    from .preprocess import bind, parse_spec
    from .preprocess_code import generate_preprocess_code

    spec = bind(parse_spec(text), model)
    code = generate_preprocess_code(spec, out_dir / "preproc", title=model.graph.name or "model")
    return spec, {"spec": spec.to_dict(), "files": [f"preproc/{p.name}" for p in code.paths]}


def _input_warnings(source: str | None, calibration, inputs: str | None, held, spec) -> list[str]:
    """Calibration arrays and ``--inputs`` checked against the spec (images are decoded by it)."""
    from .input_checks import check_inputs
    from .preprocess import IMAGE_SUFFIXES

    warnings = []
    images = calibration is not None and Path(source).is_dir() and any(
        p.suffix.lower() in IMAGE_SUFFIXES for p in Path(source).iterdir())
    if calibration is not None and not images:
        warnings += check_inputs(calibration.samples, spec, f"--calibration {source}")
    if held:
        warnings += check_inputs(held, spec, f"--inputs {inputs}")
    return warnings
