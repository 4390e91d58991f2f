"""Saved inputs for a custom layer's harness: the node's input tensors and onnxruntime's outputs.

The legalized model runs once on onnxruntime with seeded inputs (the same standard-normal
inputs verification uses) and every custom node's inputs and outputs exposed as graph outputs.
When onnxruntime cannot run the model (an op of an unknown domain without a function body),
the inputs come from the node's ancestors alone and the expected outputs are left missing: the
harness then says so instead of passing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..ir.graph import to_graph, to_model
from .spec import CustomOp


@dataclass
class NodeData:
    inputs: list[np.ndarray]
    outputs: list[np.ndarray] | None   # None: onnxruntime could not compute them
    note: str = ""


def _run(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    graph = to_graph(model)
    tensors = graph.tensors()
    graph.outputs = [tensors[n] for n in names]
    for t in graph.outputs:
        if getattr(t, "dtype", None) is None:
            t.dtype = np.float32
    exposed = to_model(graph)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    from ..ir.weights import onnxruntime_source

    source, _held = onnxruntime_source(exposed, opts)  # weight-store arrays as external initializers
    session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    from ..infra.limits import guarded_run  #  (--timeout and Ctrl-C stop a model that never ends)

    return dict(zip(names, guarded_run(session, names, {k: v for k, v in feeds.items() if k in wanted})))


def capture(model: onnx.ModelProto, ops: list[CustomOp], seed: int = 0) -> dict[str, NodeData]:
    from ..frontend.normalize import seeded_inputs

    feeds = seeded_inputs(model, seed) or {}
    inputs = sorted({t.name for op in ops for t in op.inputs if t.constant is None})
    outputs = sorted({t.name for op in ops for t in op.outputs})
    note = ""
    from ..errors import TimedOut

    try:
        values = _run(model, feeds, sorted(set(inputs) | set(outputs)))
    except TimedOut:
        raise
    except Exception as err:  # noqa: BLE001  (onnxruntime raises its own exception types)
        values = _run(model, feeds, inputs) if inputs else {}
        note = f"onnxruntime cannot run this model ({str(err).splitlines()[0][:200]}); expected outputs missing"
    result = {}
    for op in ops:
        ins = [t.constant if t.constant is not None else values[t.name] for t in op.inputs]
        outs = [values[t.name] for t in op.outputs] if all(t.name in values for t in op.outputs) else None
        result[op.node] = NodeData([np.asarray(v) for v in ins], None if outs is None else [np.asarray(v) for v in outs],
                                   note if outs is None else "")
    return result
