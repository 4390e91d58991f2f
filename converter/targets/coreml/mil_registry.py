"""The CoreML op registry (ONNX op -> MIL mapping) and the helpers the ``ops_*`` families share.

A mapping is ``handler(ctx, node) -> None`` (``@OPS.register("Conv")``), called by the shared
driver (``converter/targets/driver.py``): ``ctx.value(tensor)`` is the MIL Var or constant of an
ONNX tensor, ``ctx.const(node, i, what)`` an input MIL needs at build time, ``ctx.mb``
coremltools' builder, ``ctx.out`` the MIL name for the node's first output; the handler hands
its result (a MIL Var, a list of them, or a build-time numpy constant) to ``ctx.bind(node, ...)``.
"""

from __future__ import annotations

from ...errors import Unsupported
from ...ir.graph import static_shape
from ..driver import cannot_express
from ..registry import OpRegistry

OPS = OpRegistry("coreml", title="CoreML", skip={"Constant"}, missing="no CoreML (MIL) mapping for this op")


def unsupported(node, what: str) -> Unsupported:
    """``raise unsupported(node, "...")``: CoreML cannot write this node."""
    return cannot_express(OPS.title, node, what)


def output_shape(node, index: int = 0) -> list[int]:
    shape = static_shape(node.outputs[index])
    if shape is None:
        raise unsupported(node, "output shape must be static for CoreML")
    return list(shape)


def input_shape(node, index: int = 0) -> list[int]:
    shape = static_shape(node.inputs[index])
    if shape is None:
        raise unsupported(node, f"input {index} shape must be static for CoreML")
    return list(shape)


def gather_any(ctx, gather, x, out: str, **kw):
    """``gather(x=x, name=out, **kw)`` for data of any ONNX type: MIL's gathers take fp16, fp32
    or int32 data (apple/coremltools@e0e2f42:coremltools/converters/mil/mil/ops/defs/iOS15/scatter_gather.py),
    so a bool tensor (an attention mask after Cast) goes through int32 and back, exactly."""
    if getattr(getattr(x, "dtype", None), "__name__", "") != "bool":
        return gather(x=x, name=out, **kw)
    picked = gather(x=ctx.mb.cast(x=x, dtype="int32", name=f"{out}_i32_in"), name=f"{out}_i32", **kw)
    return ctx.mb.cast(x=picked, dtype="bool", name=out)
