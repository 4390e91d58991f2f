"""onnxruntime as a :class:`~converter.runtimes.base.Runner`: CPU, no graph optimizations, one line per failure.

Graph optimizations are off so that what is compared is the arithmetic the graph spells out, not
onnxruntime's fusions of it, and so that every exposed intermediate tensor is computed exactly as
the node that names it says.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import BadInput
from .base import Runner, one_line, onnxruntime_oracle  # noqa: F401  (one_line: part of this API)
from ..ir.graph import to_graph, to_model



def session(model: onnx.ModelProto | bytes | str | os.PathLike, threads: int | None = None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
    # Idle pool threads sleep instead of spinning: each session runs the model a few times,
    # with Python work between runs, where spinning threads only burnt CPU (ResNet-18 port:
    # -0.2 CPU s, wall no worse).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    weights = []
    if isinstance(model, onnx.ModelProto):
        # The weights go in as arrays (no 45 MB serialization per session); same session otherwise.
        from ..ir.light_model import without_weight_bytes

        source, arrays = without_weight_bytes(model, options=opts)
        if arrays:
            weights = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays.values()]
            opts.add_external_initializers(list(arrays), weights)
    else:
        source = model if isinstance(model, bytes) else str(model)
    try:
        sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
        raise BadInput(f"onnxruntime cannot load the model: {one_line(err)}") from None
    sess.edgeconv_weights = weights  # the session reads these arrays: keep them alive with it
    return sess


def run_session(sess, inputs: dict[str, np.ndarray], output_names: list[str] | None = None) -> dict[str, np.ndarray]:
    wanted = [i.name for i in sess.get_inputs()]
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise BadInput(f"no value for model input(s) {', '.join(missing)}")
    names = output_names or [o.name for o in sess.get_outputs()]
    from ..errors import EdgeconvError
    from ..infra.limits import guarded_run

    try:
        values = guarded_run(sess, names, {n: inputs[n] for n in wanted})  # time limit, Ctrl-C
    except EdgeconvError:
        raise
    except Exception as err:
        raise BadInput(f"onnxruntime failed to run the model: {one_line(err)}") from None
    return dict(zip(names, values))


class OnnxRunner(Runner):
    """``model`` in onnxruntime (CPU, no graph optimizations), named "onnxruntime <version>".

    The session is created on the first ``infer``, so that a model onnxruntime cannot load fails
    inside its stage (and is reported there) rather than when the stage list is built.
    Verification deactivates each runner once its stage has run (a session holds its own copy
    of the weights: three at once made the peak memory of a port); a later ``infer`` makes a
    new one."""

    def __init__(self, model: onnx.ModelProto | str | os.PathLike, threads: int | None = None):
        self.model, self.threads, self._session = model, threads, None
        self.oracle = onnxruntime_oracle()

    def activate(self) -> None:
        if self._session is None:
            self._session = session(self.model, self.threads)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.activate()
        return run_session(self._session, feeds)

    def intermediates(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every typed intermediate tensor of the model on ``feeds`` (one run of a copy)."""
        return intermediate_values(self.model if isinstance(self.model, onnx.ModelProto) else onnx.load(self.model),
                                   feeds)

    def deactivate(self) -> None:
        self._session = None


def onnx_runner(model: onnx.ModelProto | str | os.PathLike) -> OnnxRunner:
    """The :class:`OnnxRunner` of ``model`` (a stage runner: call it with feeds)."""
    return OnnxRunner(model)


def _with_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape/type inference on a copy when some intermediate tensor has no recorded type."""
    known = {v.name for v in list(model.graph.value_info) + list(model.graph.output)}
    if all(out in known for node in model.graph.node for out in node.output if out):
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # inference is an aid here, not a requirement
        return model


def expose_intermediates(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose outputs are its own outputs plus every typed node output.

    Returns the copy and the names of the tensors it exposes, in topological order.
    """
    graph = to_graph(_with_types(model))
    graph.toposort()
    exposed: list[gs.Variable] = list(graph.outputs)
    seen = {t.name for t in exposed}
    for node in graph.nodes:
        for out in node.outputs:
            if isinstance(out, gs.Variable) and out.name and out.name not in seen and out.dtype is not None:
                exposed.append(out)
                seen.add(out.name)
    graph.outputs = exposed
    order = [out.name for node in graph.nodes for out in node.outputs if out.name in seen]
    return to_model(graph, cleanup=False), order


def intermediate_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every typed intermediate tensor of ``model`` on ``inputs``, from one onnxruntime run."""
    exposed, _ = expose_intermediates(model)
    return run_session(session(exposed), inputs)
