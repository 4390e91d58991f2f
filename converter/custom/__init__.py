"""Remedy (4): the node stays in the model as the target's custom op/layer, plus its code.

``write_custom_layers(model, custom_nodes, framework, out_dir)`` writes, per op type, under
``out_dir/<Op>/``: the framework-neutral reference kernel (``<op>_kernel.hpp``: complete for
the ops in :data:`spec.KERNELS`, a marked body to fill in otherwise), the framework wrapper
(``frameworks.py``), a harness (``harness.cpp``) and the node's saved inputs and onnxruntime
outputs (``data/<node>/``).  It also records in the model's metadata (``CUSTOM_NODES_KEY``)
which node is which custom layer, so the target exporter emits those nodes as custom ops.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

CUSTOM_NODES_KEY = "edgeconv.custom_nodes"

_REGISTER = {
    "tflite": "Add `{op}_tflite.cc` to the app and call `resolver.AddCustom(\"{name}\", "
              "edgeconv_custom::Register_{symbol}())` on the `tflite::MutableOpResolver` "
              "(e.g. `BuiltinOpResolver`) before `InterpreterBuilder`. Compile with "
              "`-DEDGECONV_HARNESS_TFLITE` to run the harness through the TfLiteRegistration too.",
    "tnn": "Copy `tnn/*` into TNN (layer + interpreter under source/tnn/layer and "
           "source/tnn/interpreter/tnn/layer_interpreter, accs under source/tnn/device/cpu|arm/acc), "
           "add `LAYER_{upper} = 9000` to `LayerType` (source/tnn/core/layer_type.h) and "
           "`{{\"{name}\", LAYER_{upper}}}` to `global_layer_type_map` (layer_type.cc).",
    "mace": "Add `mace/{op}_op.cc` to mace/ops and register it in mace/ops/registry/ops_registry.cc "
            "(`extern void Register{name}(OpRegistry*)`; call it in the constructor).",
    "coreml": "See `coreml/README.md`: ML Programs have no custom layers; use the composite op if "
              "there is one, else the NeuralNetwork custom layer (`{name}CustomLayer.swift`).",
}


def custom_nodes_of(model: onnx.ModelProto) -> dict[str, dict]:
    """``{node name: {"layer": type string, "attrs": {...}}}`` recorded by write_custom_layers."""
    for prop in model.metadata_props:
        if prop.key == CUSTOM_NODES_KEY:
            return json.loads(prop.value)
    return {}


def write_custom_layers(model: onnx.ModelProto, custom_nodes: set[str], framework: str, out_dir: Path,
                        reasons: dict[str, str] | None = None, seed: int = 0) -> list[dict]:
    """Write every custom layer's scaffold; one JSON-ready dict per node (node, op, why, files).

    ``reasons`` (node -> the planner's reason) replaces the reason worked out here.  ``model``
    gains the :data:`CUSTOM_NODES_KEY` metadata entry (in place) for the exporter.
    """
    from ..errors import BadInput
    from ..infra.fsutil import atomic_write_bytes
    from ..ir.graph import to_graph
    from .capture import capture
    from .frameworks import FILES, layer_name
    from .scaffold import data_files, kernel_files, node_dir, render
    from .spec import read_custom_op
    from .why import why_custom

    if framework not in FILES:
        raise BadInput(f"no custom-layer scaffold for framework '{framework}'; choose one of: {', '.join(FILES)}")
    graph = to_graph(model)
    by_name = {n.name: n for n in graph.nodes}
    missing = sorted(set(custom_nodes) - set(by_name))
    if missing:
        raise BadInput(f"custom-layer node '{missing[0]}' is not in the model")
    ops = [read_custom_op(n) for n in graph.nodes if n.name in custom_nodes]
    data = capture(model, ops, seed)
    groups: dict[str, list] = {}
    for op in ops:
        groups.setdefault(op.symbol if not op.domain else f"{op.domain}.{op.symbol}", []).append(op)
    out_dir = Path(out_dir)
    results, marks = [], {}
    for _key, group in groups.items():
        op = group[0]
        folder = op.symbol if not op.domain else f"{op.symbol}_{op.domain.replace('.', '_')}"
        name = layer_name(framework, op)
        files = {**kernel_files(group), **FILES[framework](group)}
        entries = []
        for each in group:
            files.update(data_files(each, data[each.node]))
            why = (reasons or {}).get(each.node) or why_custom(graph, by_name[each.node], framework)
            entries.append({"node": each.node, "why": why, "data_dir": node_dir(each.node)})
            marks[each.node] = {"layer": name, "op": each.qualified, "attrs": each.attrs}
        register = _REGISTER[framework].format(op=op.slug, name=name, symbol=op.symbol, upper=name.upper())
        files["README.md"] = render("README.md.j2", op=op, framework=framework, name=name, entries=entries,
                                    files=sorted(files), register=register).encode()
        for rel, content in sorted(files.items()):
            atomic_write_bytes(out_dir / folder / rel, content)
        listed = sorted(f"{folder}/{rel}" for rel in files)
        for e, each in zip(entries, group):
            results.append({"node": each.node, "op": each.qualified, "layer": name, "framework": framework,
                            "why": e["why"], "kernel": "reference" if each.kernel else "fill-in",
                            "kernel_note": each.kernel_note, "dir": folder,
                            "files": [f for f in listed if "/data/" not in f or f"/data/{e['data_dir']}/" in f]})
    _mark(model, marks)
    return results


def _mark(model: onnx.ModelProto, marks: dict) -> None:
    for i, prop in enumerate(model.metadata_props):
        if prop.key == CUSTOM_NODES_KEY:
            del model.metadata_props[i]
            break
    model.metadata_props.add(key=CUSTOM_NODES_KEY, value=json.dumps(marks, sort_keys=True))
