"""onnxruntime, the way verification uses it: CPU, no graph optimizations, one line per failure.

Graph optimizations are off so that what is compared is the arithmetic the graph spells out, not
onnxruntime's fusions of it, and so that every exposed intermediate tensor is computed exactly as
the node that names it says.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import onnx

from ..errors import BadInput

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line[:400]


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
    from ..infra.isolate import guarded_run

    try:
        values = guarded_run(sess, names, {n: inputs[n] for n in wanted})  # time limit, Ctrl-C
    except EdgeconvError:
        raise
    except Exception as err:
        raise BadInput(f"onnxruntime failed to run the model: {one_line(err)}") from None
    return dict(zip(names, values))


def onnx_runner(model: onnx.ModelProto | str | os.PathLike) -> Runner:
    """A stage runner executing ``model`` in onnxruntime.

    The session is created on the first call, so that a model onnxruntime cannot load fails
    inside its stage (and is reported there) rather than when the stage list is built.
    """
    cache: dict[str, object] = {}

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if "session" not in cache:
            cache["session"] = session(model)
        return run_session(cache["session"], inputs)

    # Verification drops each session once its stage has run (a session holds its own copy of
    # the weights: three at once made the peak memory of a port); a later call makes a new one.
    run.release = cache.clear
    return run
