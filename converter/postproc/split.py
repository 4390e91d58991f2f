"""Split a model into a cut model plus generated post-processing (Python, C++, manifest).

``split`` finds the cut (``cut.find_cut``), removes the moved nodes so that the boundary tensors
become the cut model's outputs, merges those into one output when the target exposes fewer
(``merge.merge_outputs``), lowers the moved nodes to a program and generates the code.

Files (all deterministic, written atomically together when ``out_dir`` is given):

* ``postprocess.py``  — numpy only; ``postprocess(outputs: dict) -> dict``
* ``postprocess.hpp`` — header-only C++17; ``Outputs postprocess(const Inputs&)``
* ``manifest.json``   — cut-model outputs (names, dtypes, shapes, C++ fields), merge layout,
  original outputs, moved nodes and ops.

Constants read by moved nodes are embedded as literals in both code files (no side files), so
each file is self-contained; trailing heads carry small constants (priors, anchors, scales).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import BadInput, Unsupported
from ..infra.fsutil import atomic_output_dir
from ..ir.graph import constant_value, dtype_name, to_graph, to_model
from . import codegen_cpp, codegen_py
from .cut import Cut, find_cut
from .merge import merge_outputs
from .program import DTYPES, Step, lower_node

MANIFEST_FORMAT = "edgeconv.postproc/1"
FILE_NAMES = ("postprocess.py", "postprocess.hpp", "manifest.json")


@dataclass
class SplitResult:
    model: onnx.ModelProto  # the cut model
    manifest: dict
    #: file name -> text, for postprocess.py, postprocess.hpp, manifest.json
    files: dict[str, str] = field(default_factory=dict)
    cut: Cut | None = None
    #: where the files were written (when ``out_dir`` was given)
    paths: list[Path] = field(default_factory=list)

    def postprocess(self, outputs: dict) -> dict:
        """Run the generated ``postprocess.py`` on the cut model's outputs (for verification)."""
        namespace = getattr(self, "_python", None)
        if namespace is None:
            namespace = {"__name__": "edgeconv_generated_postprocess"}
            exec(compile(self.files["postprocess.py"], "postprocess.py", "exec"), namespace)  # noqa: S102
            self._python = namespace
        return namespace["postprocess"](outputs)


def _info(tensor: gs.Tensor) -> dict:
    dtype = dtype_name(tensor)
    shape = None if tensor.shape is None else [d if isinstance(d, int) else str(d) for d in tensor.shape]
    return {"name": tensor.name, "dtype": dtype, "shape": shape}


def split(model: onnx.ModelProto, must_move: set[str], max_outputs: int | None = None,
          out_dir: str | Path | None = None, *, cpp_namespace: str = "edgeconv_postproc",
          title: str | None = None) -> SplitResult:
    if max_outputs is not None and max_outputs < 1:
        raise BadInput(f"max_outputs must be at least 1, got {max_outputs}")
    graph = to_graph(model)
    cut = find_cut(graph, set(must_move))
    if not cut.ok:
        raise Unsupported(f"cannot split off post-processing: {cut.reason}")
    title = title or (model.graph.name or "model")

    tensors = graph.tensors()
    moved = set(cut.moved_nodes)
    program: list[Step] = []
    constants: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        if node.name not in moved:
            continue
        step = lower_node(node)
        assert isinstance(step, Step), step  # find_cut only moves lowerable nodes
        program.append(step)
        for name in step.inputs:
            value = constant_value(tensors[name])
            if value is not None:
                constants[name] = np.ascontiguousarray(value)

    inputs = [_info(tensors[name]) for name in cut.boundary]
    outputs = [_info(t) for t in graph.outputs]
    for info in inputs + outputs:
        if info["dtype"] not in DTYPES:
            raise Unsupported(f"cannot split off post-processing: tensor '{info['name']}' has dtype {info['dtype']}")
    dtypes = {name: dtype_name(t) for name, t in tensors.items()}

    # The cut model: the boundary tensors become its outputs; to_model drops the moved nodes.
    graph.outputs = [tensors[name] for name in cut.boundary]
    merged = None
    if max_outputs is not None and len(cut.boundary) > max_outputs:
        merged = merge_outputs(graph, list(cut.boundary))
    cut_model = to_model(graph)

    py_text = codegen_py.generate(program, inputs, outputs, constants, merged, title)
    hpp_text, in_fields, out_fields = codegen_cpp.generate(
        program, inputs, outputs, constants, merged, title, cpp_namespace, dtypes)
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": title,
        "cut_model_outputs": (
            [{"name": merged["name"], "dtype": merged["dtype"], "shape": merged["shape"],
              "cpp_field": in_fields[merged["name"]]}] if merged else
            [{**i, "cpp_field": in_fields[i["name"]]} for i in inputs]
        ),
        "boundary": [{**i, "passthrough": i["name"] in cut.passthrough} for i in inputs],
        "merged": merged,
        "outputs": [{**o, "cpp_field": out_fields[o["name"]]} for o in outputs],
        "moved_nodes": [{"name": s.node, "op": s.op} for s in program],
        "ops": sorted({s.op for s in program}),
        "constants": {name: {"dtype": v.dtype.name, "shape": list(v.shape)} for name, v in sorted(constants.items())},
        "cpp_namespace": cpp_namespace,
        "files": list(FILE_NAMES),
    }
    files = {
        "postprocess.py": py_text,
        "postprocess.hpp": hpp_text,
        "manifest.json": json.dumps(manifest, indent=2, sort_keys=True) + "\n",
    }
    result = SplitResult(cut_model, manifest, files, cut)
    if out_dir is not None:
        with atomic_output_dir(out_dir) as tmp:
            for name, text in files.items():
                (tmp / name).write_text(text, encoding="utf-8")
        result.paths = [Path(out_dir) / name for name in FILE_NAMES]
    return result
