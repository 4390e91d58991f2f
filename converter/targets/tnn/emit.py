"""Walk a normalized ONNX graph and emit TNN layers, one small converter function per ONNX op.

The converter functions live in ``layers.py``, ``layers_nn.py``, ``layers_shape.py`` and
``layers_extra.py``; each registers itself in :data:`~.registry.OPS` and appends
:class:`~.net.TnnLayer` objects through the :class:`~.context.ExportContext`; the shared driver
(``converter/targets/driver.py``) calls them in graph order.  Parameters are written from ONNX
semantics (never from the habits of TNN's own onnx2tnn converter); every parameter list follows
the order in which the matching ``source/tnn/interpreter/tnn/layer_interpreter/*.cc`` parser
reads it.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...errors import BadInput, Unsupported
from ...ir.graph import to_graph
from ..driver import lower_nodes
from . import layers, layers_extra, layers_nn, layers_shape  # noqa: F401  (they fill OPS)
from .context import TNN_DTYPES, ExportContext
from .custom import convert_custom
from .net import TnnInput, TnnNet
from .registry import OPS


def build_net(model: onnx.ModelProto, fp16_weights: bool = False) -> tuple[TnnNet, dict[str, str]]:
    """The TNN network for ``model`` and the map original tensor name -> TNN blob name."""
    graph = to_graph(model)
    graph.toposort()
    ctx = ExportContext(graph, fp16_weights)
    inputs = []
    for tensor in graph.inputs:
        if ctx.const(tensor) is not None:
            continue
        dtype = np.dtype(tensor.dtype) if tensor.dtype is not None else np.dtype(np.float32)
        if dtype not in TNN_DTYPES:
            raise Unsupported(f"TNN input '{tensor.name}' has dtype {dtype}, TNN inputs are float32, "
                              "int32/int64 (as int32), bool/int8 (as int8) or uint32")
        inputs.append(TnnInput(ctx.blob(tensor), ctx.shape(tensor), TNN_DTYPES[dtype]))
    if not inputs:
        raise BadInput("the model has no inputs; TNN needs at least one input blob")
    # remedy (4): a marked node becomes a layer type registered by the app's TNN plugin
    lower_nodes(OPS, ctx, graph.nodes, model=model, custom=convert_custom)
    if not ctx.layers:
        # model_interpreter.cc:207-209: a .tnnproto with no layer line is rejected.
        raise Unsupported("the model has no operations; TNN needs at least one layer")
    outputs = []
    for tensor in graph.outputs:
        if ctx.const(tensor) is not None or tensor in graph.inputs:
            raise Unsupported(f"output '{tensor.name}' is a constant or an input; TNN outputs must be layer outputs")
        outputs.append(ctx.blob_names.of(tensor.name))
    # Constants only reachable as layer parameters are not blobs: keep the map minimal.
    used = {name for layer in ctx.layers for name in layer.inputs}
    constants = {k: v for k, v in sorted(ctx.constants.items()) if k in used}
    net = TnnNet(inputs, outputs, ctx.layers, constants)
    return net, dict(ctx.blob_names.by_original)
