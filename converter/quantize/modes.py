"""Which quantization a port gets: the user's ``--quantize`` against the hardware's dtypes.

The support matrix lists, per framework x hardware, the dtypes it runs
(``properties.dtypes``).  Hardware without a float type (the Edge TPU: int8/uint8; MACE's DSP
and APU: uint8) runs only full-integer models, so it *implies* quantization even without
``--quantize``: int8 where int8 is listed, else uint8, with inputs and outputs quantized and no
layer left in float; it needs calibration data, and says so in one line when none is given.

``--quantize auto`` picks the lowest precision the hardware runs (int8, else uint8, else
float16; nothing on float32-only hardware) and lets :mod:`.auto` keep layers in float (when the
hardware has a float type) or re-calibrate them where accuracy drops.

A mode the hardware cannot run is one BadInput line (``--quantize int8`` on a GPU that runs
float32/float16 only).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput
from .ranges import METHODS

MODES = ("int8", "uint8", "fp16", "int8-weights", "auto")
FLOAT_TYPES = {"float32", "float16", "bfloat16"}
CALIBRATION_HELP = ("give --calibration SRC (an .npz keyed by input name, a directory of .npy/.npz files, "
                    "or a directory of images with --preprocess SPEC)")


class CalibrationRequired(BadInput):
    """Integer quantization without calibration data.  With ``--hw all`` this is an answer about
    one hardware (it needs data), not the user's mistake: ``port`` lists it with the others."""


@dataclass(frozen=True)
class QuantRequest:
    """What the user asked for (``port``/``batch`` options)."""

    mode: str | None = None
    calibration: str | None = None
    method: str = "minmax"
    per_tensor: bool = False
    preprocess: str | None = None
    #: Correct the int32 biases for weight rounding (``--no-bias-correction`` turns it off).
    bias_correction: bool = True

    def validate(self) -> None:
        """Every flag on its own (before any model is loaded); one BadInput line per mistake."""
        from pathlib import Path

        if self.mode is not None and self.mode not in MODES:
            raise BadInput(f"--quantize '{self.mode}': choose one of {', '.join(MODES)}")
        if self.method not in METHODS:
            raise BadInput(f"--calibration-method '{self.method}': choose one of {', '.join(METHODS)}")
        if self.calibration is not None and not Path(self.calibration).exists():
            raise BadInput(f"--calibration {self.calibration}: no such file or directory")
        if self.preprocess:
            from .preprocess import parse_spec

            parse_spec(self.preprocess)


@dataclass(frozen=True)
class QuantPlan:
    """What this port does."""

    mode: str                # int8 | uint8 | int8-weights | fp16
    auto: bool
    #: The hardware runs only 8-bit: inputs/outputs quantized, nothing left in float.
    full_integer: bool
    #: The hardware can run float layers (mixed precision may keep some).
    float_allowed: bool
    per_channel: bool
    method: str
    #: Why this mode, for the report ("edgetpu runs only int8/uint8: full-integer int8 implied").
    reason: str
    bias_correction: bool = True
    #: The model came quantized (:mod:`.given`): its own scales and zero points, no calibration.
    given: bool = False

    @property
    def needs_calibration(self) -> bool:
        return self.mode in ("int8", "uint8")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def plan_quantization(request: QuantRequest, dtypes, framework: str, hw: str, given: str | None = None) -> QuantPlan | None:
    """The plan for one framework x hardware, or None (no quantization).  ``given``: the type a
    quantized input came quantized to (its scales are kept: no calibration needed)."""
    request.validate()
    dtypes = set(dtypes or ["float32"])
    runs_float = bool(dtypes & FLOAT_TYPES)
    listed = "/".join(sorted(dtypes))
    mode, auto, reason = request.mode, request.mode == "auto", ""
    integer = [m for m in ("int8", "uint8") if m in dtypes]
    if given and (mode is None or auto) and integer:
        mode, auto = integer[0], False
        reason = f"the model is quantized ({given}): {framework}/{hw} runs {mode}, with the model's own scales"
    elif mode is None:
        if runs_float:
            return None
        mode = "int8" if "int8" in dtypes else "uint8"
        reason = f"{hw} runs only {listed} models: full-integer {mode} implied"
    elif auto:
        mode = next((m for m, t in (("int8", "int8"), ("uint8", "uint8"), ("fp16", "float16")) if t in dtypes), None)
        if mode is None:
            return None
        reason = f"auto: {mode}, the lowest precision {framework}/{hw} runs ({listed})"
    else:
        needed = {"int8": "int8", "uint8": "uint8", "fp16": "float16", "int8-weights": None}[mode]
        if mode == "int8-weights" and not runs_float:
            raise BadInput(f"--quantize int8-weights keeps activations in float, but {hw} runs only {listed} models; "
                           "use --quantize int8/uint8")
        if needed is not None and needed not in dtypes:
            raise BadInput(f"--quantize {mode}: {framework}/{hw} runs {listed} models, not {needed}; "
                           "choose another mode or auto")
        reason = f"--quantize {mode}"
    plan = QuantPlan(mode=mode, auto=auto, full_integer=not runs_float, float_allowed=runs_float,
                     per_channel=not request.per_tensor, method=request.method, reason=reason,
                     bias_correction=request.bias_correction and not (given and mode in ("int8", "uint8")),
                     given=bool(given) and mode in ("int8", "uint8"))
    if plan.needs_calibration and not request.calibration and not plan.given:
        if not runs_float:
            raise CalibrationRequired(f"{hw} runs only {listed} models: full-integer quantization needs calibration "
                                      "data; " + CALIBRATION_HELP)
        raise CalibrationRequired(f"--quantize {request.mode} needs calibration data; " + CALIBRATION_HELP)
    return plan
