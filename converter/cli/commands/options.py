"""Options shared by several commands: one declaration each, so names and help never drift.

Plain options (``--json``, ``--to/-t``, ``--hw``, ``-o/--out``) are typer declarations used as
parameter defaults.  Two groups always travel together and arrive as one value:

* :func:`model_options` replaces a ``source: ModelSource`` parameter by ``MODEL``,
  ``-s/--input-shape``, ``--trust-pickle``, ``--timeout`` and ``--max-memory``
  (:class:`converter.frontend.source.ModelSource`);
* :func:`matrix_options` replaces a ``matrix: MatrixSource`` parameter by ``--matrix`` and
  ``--matrix-overlay``.

Typer reads a command's parameters from its signature, so the decorators splice the group's
parameters into the signature and fold the values back into one object before the command
runs.  No heavy imports here: ``edgeconv --help`` must start fast.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import typer

from ...frontend.source import ModelSource
from ...frontend.source import MatrixSource

__all__ = ["MatrixSource", "ModelSource", "matrix_options", "model_options"]

ShapeList = list[str] | None

MODEL_HELP = "Model file: .onnx, .pt (TorchScript), .pt2, .pb, .tflite, .keras, .h5, or a SavedModel directory."

Json = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")
Framework = typer.Option(..., "--to", "-t", metavar="FRAMEWORK",
                         help="Framework: tflite, tnn, mace, coreml, or all.")
OneFramework = typer.Option(..., "--to", "-t", metavar="FRAMEWORK", help="Framework: tflite, tnn, mace or coreml.")
_HW = "Hardware as users say it (cpu, gpu, npu, dsp, ane, arm, ...)"
_CPU = "the framework's CPU (tflite cpu, tnn arm, mace cpu, coreml cpu)"
HardwareOrAll = typer.Option(None, "--hw", metavar="HW", show_default=False,
                             help=f"{_HW}, or all. Default: {_CPU}; with --to all: all hardware of every framework.")
Hardware = typer.Option(None, "--hw", metavar="HW", show_default=False,
                        help=f"{_HW}, or all. Default: {_CPU}; with --to all: each framework's CPU.")
OneHardware = typer.Option(None, "--hw", metavar="HW", show_default=False, help=f"{_HW}. Default: {_CPU}.")


# Verification (``port`` and ``verify``).
VerifyInputs = typer.Option(None, "--inputs", metavar="NPZ",
                            help="Verification inputs (.npz, one array per input; the first axis holds the samples: "
                                 "[N,3,224,224] or [N,1,3,224,224] for a 1x3x224x224 input).")
Atol = typer.Option(None, "--atol", help="Absolute tolerance per element (default 1e-4, or the profile's).")
Rtol = typer.Option(None, "--rtol", help="Relative tolerance per element (default 1e-3, or the profile's).")
Tolerances = typer.Option(None, "--tolerances", metavar="YAML",
                          help="Tolerance profile (YAML: atol, rtol, layer_rmse, outputs: {name: {atol, rtol}}).")
Seed = typer.Option(0, "--seed", help="Seed of the random verification inputs.")
InputRange = typer.Option(None, "--input-range", "--range", metavar="NAME=LOW:HIGH",
                          help="Values random inputs draw: integers from [LOW, HIGH) (token ids: ids=0:30522), "
                               "floats uniformly (image=0:1; a bare 0:1 applies to every float input). Default: "
                               "floats in [-1, 1), integers in [0, 4), masks all ones, position ids 0, 1, 2, ... "
                               "(repeatable).")
Runtime = typer.Option(None, "--runtime", metavar="FW=PATH",
                       help="Judge the target stage with a real runtime: tnn=PATH (tnn_run, TNNTest or a TNN build "
                            "dir), mace=PATH (mace_run). Repeatable; default from EDGECONV_TNN_RUNTIME / "
                            "EDGECONV_MACE_RUNTIME, else edgeconv's built-in readers.")

# Quantization (``port``; the batch manifest has the same keys, see converter/batch/manifest.py).
Quantize = typer.Option(None, "--quantize", metavar="MODE",
                        help="int8, uint8, fp16, int8-weights or auto (the lowest precision the hardware runs, "
                             "layers that lose most kept in float). 8-bit-only hardware implies int8/uint8.")
Calibration = typer.Option(None, "--calibration", metavar="SRC",
                           help="Calibration data: an .npz keyed by input name (the first axis holds the samples: "
                                "[N,3,224,224] or [N,1,3,224,224] for a 1x3x224x224 input), a directory of .npy/.npz "
                                "files, or a directory of images (with --preprocess).")
CalibrationMethod = typer.Option("minmax", "--calibration-method", metavar="METHOD",
                                 help="Activation ranges: minmax, percentile, entropy or mse.")
PerTensor = typer.Option(False, "--per-tensor", help="One weight scale per tensor instead of per output channel.")
NoBiasCorrection = typer.Option(False, "--no-bias-correction",
                                help="int8/uint8: keep the biases as quantized, without correcting them for the "
                                     "mean shift of weight rounding.")
Preprocess = typer.Option(None, "--preprocess", metavar="SPEC",
                          help="How images become inputs, e.g. rgb,resize=224x224,range=0-1,mean=0.485/0.456/0.406,"
                               "std=0.229/0.224/0.225,layout=nchw (or a YAML file); writes preproc/ code too.")


def out_dir(default: str | None, help_text: str = "Output directory.") -> typer.models.OptionInfo:
    """``-o/--out DIR`` (every command that writes spells it the same way)."""
    return typer.Option(default, "-o", "--out", metavar="DIR", help=help_text)


def out_file(default: str | None, help_text: str) -> typer.models.OptionInfo:
    """``-o/--out FILE``."""
    return typer.Option(default, "-o", "--out", metavar="FILE", help=help_text)


def model_options(as_option: bool = False) -> Callable:
    """Replace the command's ``source`` parameter by MODEL, ``-s/--input-shape``, ``--trust-pickle``.

    ``as_option``: the model is an optional ``--model`` (``report``) instead of the argument.
    """
    model = (typer.Option(None, "--model", metavar="MODEL", help="Also show this model. " + MODEL_HELP)
             if as_option else typer.Argument(..., metavar="MODEL", help=MODEL_HELP))
    group = [
        _param("model", (str | None) if as_option else str, model),
        _param("input_shape", ShapeList, typer.Option(
            None, "--input-shape", "-s", metavar="[NAME=]SHAPE[:DTYPE]",
            help="Fix an input shape, e.g. input=1x3x224x224, and optionally its type: ids=1x128:int64 (float32, "
                 "float16, int64, int32, bool; repeatable; a bare 1x3x224x224 means the first input). Required for "
                 "TorchScript (traced with float32 unless a type is given) and for dynamic dimensions.")),
        _param("trust_pickle", bool, typer.Option(
            False, "--trust-pickle", help="Allow code inside the model file: pickled objects (torch.save of a "
                                          "module, pickled .pt2 entries), Keras Lambda layers, TF PyFunc ops.")),
        _param("timeout", float, typer.Option(
            600.0, "--timeout", metavar="SECONDS", min=0,
            help="Stop user model code (TorchScript forward, tracing, export) after this long (exit 9); 0: no limit.")),
        _param("max_memory", str | None, typer.Option(
            None, "--max-memory", metavar="SIZE",
            help="Refuse (exit 2) models whose reference inference needs more, e.g. 8G. Default: half the RAM.")),
    ]
    return _splice("source", group, lambda model, input_shape, trust_pickle, timeout, max_memory:
                   ModelSource.from_flags(model, input_shape, trust_pickle, _timeout(timeout), max_memory))


def _timeout(seconds: float | None) -> float | None:
    """--timeout applies to everything this command runs (torch loading, onnxruntime)."""
    from ...infra.limits import set_time_limit

    set_time_limit(seconds)
    return seconds


def matrix_options() -> Callable:
    """Replace the command's ``matrix`` parameter by ``--matrix`` and ``--matrix-overlay``."""
    group = [
        _param("matrix_path", str | None, typer.Option(
            None, "--matrix", metavar="YAML", help="Use this op support matrix instead of the bundled one.")),
        _param("matrix_overlay", ShapeList, typer.Option(
            None, "--matrix-overlay", metavar="YAML",
            help="Add or override matrix entries from this YAML (repeatable).")),
    ]
    return _splice("matrix", group, lambda matrix_path, matrix_overlay:
                   MatrixSource(matrix_path, tuple(matrix_overlay or ())))


def _param(name: str, annotation, default) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation)


def _splice(target: str, group: list[inspect.Parameter], build: Callable) -> Callable:
    """Decorator: parameter ``target`` of the command becomes the ``group`` parameters in its
    signature (what typer reads); at call time ``build(**group values)`` is passed as ``target``."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        if target not in signature.parameters:
            raise TypeError(f"{command.__name__} has no parameter '{target}' to expand")
        params = []
        for p in signature.parameters.values():
            params += group if p.name == target else [p]
        names = [p.name for p in group]

        @functools.wraps(command)
        def wrapper(**kwargs):
            values = {name: kwargs.pop(name) for name in names}
            return command(**kwargs, **{target: build(**values)})

        wrapper.__signature__ = signature.replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def stdout_console():
    """A rich console for results: full width on a terminal, wide when piped (CI logs, files)
    so that tables keep their columns instead of folding into 80 characters."""
    import os
    import sys

    from rich.console import Console

    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(file=sys.stdout, width=200 if piped else None)

