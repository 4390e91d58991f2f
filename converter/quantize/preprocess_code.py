"""Generate ``preproc/preprocess.py`` (numpy) and ``preprocess.hpp`` (C++17) from a bound spec.

The spec's graph (:mod:`.preprocess_graph`) is lowered with the post-processing lowering and
written by the post-processing code generators (``converter/postproc/codegen_*``), only with a
pre-processing :class:`~converter.postproc.codegen_py.Role`: one generator for both ends of the
model.  The generated function takes ``{"image": HxWxC uint8}`` (decoded, RGB or L, already
resized to the spec's size) and returns ``{<model input>: float32 tensor}``.

Files (deterministic; written atomically together): ``preprocess.py``, ``preprocess.hpp``,
``manifest.json`` (the spec, the image and model-input tensors with their C++ field names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..infra.fsutil import atomic_output_dir
from ..ir.graph import constant_value, dtype_name
from ..postproc import codegen_cpp, codegen_py
from ..postproc.codegen_py import Role
from ..postproc.program import Step, lower_node
from .preprocess import PreprocessSpec
from .preprocess_graph import spec_graph

MANIFEST_FORMAT = "edgeconv.preproc/1"
FILE_NAMES = ("preprocess.py", "preprocess.hpp", "manifest.json")
NAMESPACE = "edgeconv_preproc"

PREPROCESS = Role(
    function="preprocess",
    heading="Pre-processing for {title}: a decoded, resized image -> the model input (edgeconv --preprocess).",
    argument="inputs",
    usage="model_inputs = preprocess({'image': hwc_uint8})  # {input name: np.ndarray}",
    inputs_doc="the decoded image, HxWxC uint8, already resized",
    outputs_doc="the model input",
    summary="The model input, from {'image': HxWxC uint8 array} (decoded, resized).",
)


@dataclass
class PreprocessCode:
    files: dict[str, str]
    manifest: dict
    paths: list[Path] = field(default_factory=list)

    def preprocess(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """Run the generated ``preprocess.py`` (for tests and verification)."""
        namespace: dict = {"__name__": "edgeconv_generated_preprocess"}
        exec(compile(self.files["preprocess.py"], "preprocess.py", "exec"), namespace)  # noqa: S102
        return namespace["preprocess"]({"image": image})


def _info(tensor) -> dict:
    return {"name": tensor.name, "dtype": dtype_name(tensor), "shape": [int(d) for d in tensor.shape]}


def generate_preprocess_code(spec: PreprocessSpec, out_dir: str | Path | None = None,
                             title: str = "model") -> PreprocessCode:
    graph = spec_graph(spec)
    tensors = graph.tensors()
    program: list[Step] = []
    constants: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        step = lower_node(node)
        if not isinstance(step, Step):  # every op of the spec graph has a kernel
            raise AssertionError(step)
        program.append(step)
        for name in step.inputs:
            value = constant_value(tensors[name])
            if value is not None:
                constants[name] = np.ascontiguousarray(value)
    inputs = [_info(t) for t in graph.inputs]
    outputs = [_info(t) for t in graph.outputs]
    dtypes = {name: dtype_name(t) for name, t in tensors.items()}
    py_text = codegen_py.generate(program, inputs, outputs, constants, None, title, role=PREPROCESS)
    hpp_text, in_fields, out_fields = codegen_cpp.generate(program, inputs, outputs, constants, None, title,
                                                           NAMESPACE, dtypes, role=PREPROCESS)
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": title,
        "spec": spec.to_dict(),
        "inputs": [{**i, "cpp_field": in_fields[i["name"]]} for i in inputs],
        "outputs": [{**o, "cpp_field": out_fields[o["name"]]} for o in outputs],
        "function": PREPROCESS.function,
        "cpp_namespace": NAMESPACE,
        "not_included": "decoding and resizing: feed the image decoded to "
                        f"{'L' if spec.order == 'gray' else 'RGB'} and resized to {spec.resize[0]}x{spec.resize[1]} (bilinear)",
        "files": list(FILE_NAMES),
    }
    files = {
        "preprocess.py": py_text,
        "preprocess.hpp": hpp_text,
        "manifest.json": json.dumps(manifest, indent=2, sort_keys=True) + "\n",
    }
    code = PreprocessCode(files, manifest)
    if out_dir is not None:
        with atomic_output_dir(out_dir) as tmp:
            for name, text in files.items():
                (tmp / name).write_text(text, encoding="utf-8")
        code.paths = [Path(out_dir) / name for name in FILE_NAMES]
    return code
