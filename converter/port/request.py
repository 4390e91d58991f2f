"""What a port is asked to do, as typed values, built in one place from the flat names users give.

The command line (``edgeconv port``), a batch manifest entry and the Python API
(:func:`converter.port.port`) spell a port's options the same way: the names in :data:`FLAGS`.
:meth:`PortRequest.from_flags` is the only place those names become the typed specs each stage
takes -- :class:`~converter.frontend.source.ModelSource`, :class:`~converter.matrix.source.MatrixSource`,
:class:`~converter.verify.spec.VerifySpec` (None: no verification),
:class:`~converter.quantize.modes.QuantRequest`, :class:`LegalizeSpec` and the user's part of
:class:`~converter.targets.base.ExportOptions`.  No heavy imports here: the CLI builds it first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..frontend.declared_inputs import check_range, ranges_from_value, shapes_from_value
from ..frontend.source import ModelSource
from ..frontend.source import MatrixSource
from ..quantize.modes import QuantRequest
from ..targets.base import ExportOptions
from ..verify.spec import VerifySpec

#: Every option of a port by its flat name (CLI flag without dashes, manifest key, API keyword),
#: and the spec it goes to.
FLAGS = {
    "input_shapes": "source", "example_inputs": "source", "trust_pickle": "source", "timeout": "source", "max_memory": "source",
    "matrix": "matrix", "matrix_overlays": "matrix",
    "verify": "verify", "inputs": "verify", "atol": "verify", "rtol": "verify", "tolerances": "verify",
    "seed": "verify", "input_ranges": "verify",
    "quantize": "quant", "calibration": "quant", "calibration_method": "quant", "per_tensor": "quant",
    "bias_correction": "quant", "preprocess": "quant",
    "retrain_hook": "legalize", "custom_ops": "legalize",
    "fp16_weights": "export", "keep_nchw_io": "export",
    "runtimes": "runtimes", "command_line": "port",
}


@dataclass(frozen=True)
class LegalizeSpec:
    """``--retrain-hook`` (pkg.module:function fitting the blocks an architecture change adds)
    and ``--custom-op`` (op types forced to become custom layers)."""

    retrain_hook: str | None = None
    custom_ops: tuple[str, ...] = ()


@dataclass(frozen=True)
class PortRequest:
    source: ModelSource
    matrix: MatrixSource = MatrixSource()
    verify: VerifySpec | None = VerifySpec()
    quant: QuantRequest = QuantRequest()
    legalize: LegalizeSpec = LegalizeSpec()
    #: The user's export choices (``fp16_weights``, ``keep_nchw_io``); each port adds the rest.
    export: ExportOptions = ExportOptions()
    #: Real runtimes by framework (``--runtime tnn=PATH``); the environment fills in the rest.
    runtimes: Mapping[str, str] = field(default_factory=dict)
    command_line: str = ""

    @classmethod
    def from_flags(cls, model, **flags) -> PortRequest:
        """The request for ``model`` (a path or an ONNX model) from flat options (:data:`FLAGS`);
        an unknown name is a BadInput naming it."""
        unknown = sorted(set(flags) - set(FLAGS))
        if unknown:
            from ..errors import BadInput

            raise BadInput(f"unknown port option(s): {', '.join(unknown)}; known: {', '.join(sorted(FLAGS))}")
        g = flags.get
        # -s's spelling (["ids=1x128:int64"]) or a mapping ({"ids": [1, 128]} / {"ids": "1x128:int64"})
        shapes, dtypes = shapes_from_value(g("input_shapes"), "input_shapes")
        source = ModelSource(model, shapes, bool(g("trust_pickle", False)), g("timeout"), _size(g("max_memory")),
                             input_dtypes=dtypes)
        if g("example_inputs") is not None:
            source = dataclasses.replace(source, example_inputs=tuple(g("example_inputs")))
        verify = VerifySpec(g("inputs"), g("atol"), g("rtol"), g("tolerances"), g("seed") or 0,
                            ranges=ranges_from_value(g("input_ranges"), "input_ranges")) \
            if g("verify", True) else None
        quant = QuantRequest(mode=g("quantize"), calibration=g("calibration"),
                             method=g("calibration_method") or "minmax", per_tensor=bool(g("per_tensor", False)),
                             preprocess=g("preprocess"), bias_correction=bool(g("bias_correction", True)))
        return cls(source=source, matrix=MatrixSource(g("matrix"), tuple(g("matrix_overlays") or ())),
                   verify=verify, quant=quant,
                   legalize=LegalizeSpec(g("retrain_hook"), tuple(g("custom_ops") or ())),
                   export=ExportOptions(fp16_weights=bool(g("fp16_weights", False)),
                                        keep_nchw_io=bool(g("keep_nchw_io", False))),
                   runtimes=dict(g("runtimes") or {}), command_line=g("command_line") or "")

    def validate(self) -> None:
        """Every option on its own, before any model is loaded: one BadInput line per mistake."""
        from ..targets.oracles import validate

        validate(dict(self.runtimes))
        self.quant.validate()
        for name, span in (self.verify.ranges if self.verify is not None else {}).items():
            if name in self.source.input_dtypes:  # the rest are checked against the model's types
                check_range(name, self.source.input_dtypes[name], span)

    @property
    def verifies(self) -> bool:
        return self.verify is not None

    @property
    def quantizes(self) -> bool:
        """Did the user ask for quantization (8-bit-only hardware implies it even when not)?"""
        return self.quant.mode is not None or self.quant.calibration is not None


def _size(value):
    if isinstance(value, str):
        from ..ir.memory import parse_size

        return parse_size(value)
    return value
