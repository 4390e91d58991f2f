"""Execute a saved ML Program op by op in numpy — the CoreML check on machines without Core ML.

Core ML prediction needs macOS.  Elsewhere we still execute *the program as saved in the
``.mlpackage``* (what ships), not the builder's in-memory program:

1. ``ct.models.MLModel(path, skip_model_load=True)`` reads the package through coremltools'
   ModelPackage reader, and ``coremltools.converters.mil.frontend.milproto.load`` turns the
   saved ``Program`` protobuf — with its weights read back from ``weights/weight.bin`` — into
   pymil operations.
2. Each operation is evaluated in program order: with coremltools' own implementation of the op
   (its ``value_inference``, the code coremltools uses to constant-fold) where one exists, and
   otherwise with a numpy kernel written from Apple's op spec (``kernels.py``: conv, pooling,
   normalization, ...), each tested against onnxruntime.
3. Every result is cast to the dtype the program declares for that variable (fp16 programs run
   in fp16 between ops, as typed execution on device does) and checked against its declared
   shape.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput, Unsupported, VerificationFailed
from . import quantized as _quantized  # noqa: F401  (registers the constexpr_affine_dequantize kernel)
from .kernels import KERNELS


def load_program(package: str | Path):
    """The pymil Program stored in a ``.mlpackage`` (read back from its files)."""
    from .quiet import coremltools, silenced

    ct = coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load

    package = Path(package)
    if not (package / "Manifest.json").is_file():
        raise BadInput(f"'{package}' is not an .mlpackage (no Manifest.json)")
    with silenced():
        mlmodel = ct.models.MLModel(str(package), skip_model_load=True)
    spec = mlmodel.get_spec()
    if spec.WhichOneof("Type") != "mlProgram":
        raise BadInput(f"'{package}' holds a {spec.WhichOneof('Type')} model, not an ML Program")
    return load(spec, spec.specificationVersion, mlmodel.weights_dir or "")


def run_package(package: str | Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return execute(load_program(package), feeds)


def execute(program, feeds: dict[str, np.ndarray], function: str = "main",
            keep: bool = False) -> dict[str, np.ndarray]:
    """Run ``program``'s function on ``feeds``; returns its outputs (every value if ``keep``)."""
    func = program.functions[function]
    values: dict[str, Any] = {}
    for name, var in func.inputs.items():
        if name not in feeds:
            raise BadInput(f"missing input '{name}'")
        values[name] = _as_declared(var, np.asarray(feeds[name]), "input")
    for op in func.operations:
        results = run_op(op, values)
        for var, value in zip(op.outputs, results):
            # Constants are used exactly as loaded from the file (pymil's own value types).
            values[var.name] = value if op.op_type == "const" else _as_declared(var, value, op)
    if keep:
        return values
    return {var.name: values[var.name] for var in func.outputs}


def run_op(op, values: dict[str, Any]) -> list[Any]:
    if op.blocks:
        raise Unsupported(f"MIL op '{op.name}' ({op.op_type}): control flow is not executed here")
    if op.op_type == "const":
        return [op.outputs[0].val]
    args = {name: _lookup(var, values) for name, var in op.inputs.items()}
    kernel = KERNELS.get(op.op_type)
    result = kernel(op, args) if kernel else _coremltools_value_inference(op, args)
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _lookup(var, values):
    if isinstance(var, (list, tuple)):
        return [values[v.name] for v in var]
    return values[var.name]


def _coremltools_value_inference(op, args: dict[str, Any]):
    """Evaluate ``op`` with coremltools' own ``value_inference`` on concrete input values.

    A shallow copy of the op gets stand-in input Vars that carry the values; the op's class
    code then runs unchanged.
    """
    from coremltools.converters.mil.mil.operation import Operation

    if type(op).value_inference is Operation.value_inference:
        raise Unsupported(f"MIL op '{op.name}' ({op.op_type}): no numpy implementation to execute it")
    clone = copy.copy(op)
    clone._input_vars = dict(op._input_vars)
    for name, var in op.inputs.items():
        if isinstance(var, (list, tuple)):
            stub = type(var)(_value_var(v, a) for v, a in zip(var, args[name]))
        else:
            stub = _value_var(var, args[name])
        clone._input_vars[name] = stub
        object.__setattr__(clone, name, stub)
    result = clone.value_inference()
    if result is None:
        raise Unsupported(f"MIL op '{op.name}' ({op.op_type}): coremltools could not evaluate it")
    return result


def _value_var(var, value):
    """A detached Var of ``var``'s type holding ``value``."""
    from coremltools.converters.mil.mil.var import Var

    if isinstance(value, np.bool_):
        # numpy >= 2 refuses np.bool_ where coremltools passes flags on (keepdims=...).
        value = bool(value)
    sym = var.sym_type()
    sym.val = value
    return Var(var.name, var.sym_type, sym_val=sym)


def _as_declared(var, value, where) -> Any:
    """Cast to the declared dtype and check the declared shape (catches kernel mistakes)."""
    from coremltools.converters.mil.mil import types

    if isinstance(value, str) or var.dtype is types.str:
        return value
    dtype = types.nptype_from_builtin(var.dtype)
    array = np.asarray(value).astype(dtype, copy=False)
    declared = getattr(var, "shape", None)
    if declared is not None and all(isinstance(d, (int, np.integer)) for d in declared):
        if tuple(array.shape) != tuple(int(d) for d in declared):
            where = where if isinstance(where, str) else f"op '{where.name}' ({where.op_type})"
            raise VerificationFailed(
                f"MIL {where}: computed shape {list(array.shape)} but the program declares "
                f"{[int(d) for d in declared]} for '{var.name}'"
            )
    return array[()] if array.ndim == 0 else array  # scalars stay numpy scalars, as pymil keeps them
