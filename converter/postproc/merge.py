"""Merge several cut-model outputs into one, for runtimes that expose fewer outputs.

Before (boundary tensors a: float32[1,4,5,8,8], b: float32[1,4,1,8,8], c: int64[1,8])::

    ... -> a    ... -> b    ... -> c          (three graph outputs)

After::

    a -> Reshape[1,1280] ─┐
    b -> Reshape[1,256]  ─┼─> Concat(axis=1) -> edgeconv_merged: float32[1, 1544]
    c -> Cast(float32) -> Reshape[1,8] ─┘

The merge is separable: the layout (offset, element count, shape, original dtype, original name
of each piece) goes into the manifest, and the generated post-processing slices the pieces back
out and casts them to their original dtypes.  The common dtype is the pieces' dtype when they
agree, float32 otherwise (integers then survive exactly up to 2**24, which covers indices and
class ids of any realistic head).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ..errors import Unsupported
from ..ir.graph import NameAllocator, dtype_name, make_constant, make_variable, static_shape

MERGED_NAME = "edgeconv_merged"


def merge_outputs(graph: gs.Graph, names: list[str]) -> dict:
    """Replace ``graph.outputs`` (the tensors ``names``) with one merged output; return the layout."""
    tensors = graph.tensors()
    pieces = []
    for name in names:
        tensor = tensors[name]
        shape = static_shape(tensor)
        if shape is None:
            raise Unsupported(f"cannot merge output '{name}' into one: its shape {tensor.shape} is not static")
        dtype = dtype_name(tensor)
        if dtype is None:
            raise Unsupported(f"cannot merge output '{name}' into one: its dtype is unknown")
        pieces.append((tensor, shape, dtype))

    dtypes = {dtype for _, _, dtype in pieces}
    common = dtypes.pop() if len(dtypes) == 1 else "float32"
    alloc = NameAllocator(graph)
    flat, layout, offset = [], [], 0
    for tensor, shape, dtype in pieces:
        numel = int(np.prod(shape, dtype=np.int64))
        value = tensor
        if dtype != common:
            cast = make_variable(alloc, f"{MERGED_NAME}_cast", dtype=np.dtype(common), shape=list(shape))
            graph.nodes.append(gs.Node("Cast", alloc(f"{MERGED_NAME}_cast"), {"to": _onnx_dtype(common)}, [value], [cast]))
            value = cast
        target = make_constant(alloc, f"{MERGED_NAME}_shape", np.array([1, numel], dtype=np.int64))
        reshaped = make_variable(alloc, f"{MERGED_NAME}_flat", dtype=np.dtype(common), shape=[1, numel])
        graph.nodes.append(gs.Node("Reshape", alloc(f"{MERGED_NAME}_reshape"), {}, [value, target], [reshaped]))
        flat.append(reshaped)
        layout.append({"name": tensor.name, "offset": offset, "numel": numel, "shape": list(shape), "dtype": dtype})
        offset += numel

    merged = gs.Variable(MERGED_NAME if MERGED_NAME not in tensors else alloc(MERGED_NAME),
                         dtype=np.dtype(common), shape=[1, offset])
    graph.nodes.append(gs.Node("Concat", alloc(f"{MERGED_NAME}_concat"), {"axis": 1}, flat, [merged]))
    graph.outputs = [merged]
    return {"name": merged.name, "dtype": common, "shape": [1, offset], "pieces": layout}


def _onnx_dtype(name: str) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(name))
