"""Remedy (4): the node stays in the model as the target's custom op/layer, plus its code.

``write_custom_layers(model, custom_nodes, target, out_dir)`` writes, per op type, under
``out_dir/<Op>/``: the framework-neutral reference kernel (``<op>_kernel.hpp``: complete for
the ops in :data:`spec.KERNELS`, a marked body to fill in otherwise), the target's wrapper
files (``Target.custom_layer_files``), a harness (``harness.cpp``) and the node's saved inputs
and onnxruntime outputs (``data/<node>/``).  It also records in the model's metadata (``CUSTOM_NODES_KEY``)
which node is which custom layer, so the target exporter emits those nodes as custom ops.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

CUSTOM_NODES_KEY = "edgeconv.custom_nodes"

def custom_nodes_of(model: onnx.ModelProto) -> dict[str, dict]:
    """``{node name: {"layer": type string, "attrs": {...}}}`` recorded by write_custom_layers."""
    for prop in model.metadata_props:
        if prop.key == CUSTOM_NODES_KEY:
            return json.loads(prop.value)
    return {}


def write_custom_layers(model: onnx.ModelProto, custom_nodes: set[str], target, out_dir: Path,
                        reasons: dict[str, str] | None = None, seed: int = 0, why=None) -> list[dict]:
    """Write every custom layer's scaffold for ``target`` (a :class:`~converter.targets.base.Target`);
    one JSON-ready dict per node (node, op, why, files).

    ``reasons``: node -> the planner's reason; ``why(graph, node)`` gives one for a node without
    (:func:`converter.legalize.why_custom.why_custom`).  ``model`` gains the
    :data:`CUSTOM_NODES_KEY` metadata entry (in place) for the exporter.
    """
    from ..errors import BadInput
    from ..infra.fsutil import atomic_write_bytes
    from ..ir.graph import to_graph
    from .capture import capture
    from .scaffold import data_files, kernel_files, node_dir, render
    from .spec import read_custom_op

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
    for group in groups.values():
        op = group[0]
        folder = op.symbol if not op.domain else f"{op.symbol}_{op.domain.replace('.', '_')}"
        name = target.custom_layer_name(op)
        files = {**kernel_files(group), **target.custom_layer_files(group, name)}
        entries = []
        for each in group:
            files.update(data_files(each, data[each.node]))
            reason = (reasons or {}).get(each.node) or (why(graph, by_name[each.node]) if why else "custom layer")
            entries.append({"node": each.node, "why": reason, "data_dir": node_dir(each.node)})
            marks[each.node] = {"layer": name, "op": each.qualified, "attrs": each.attrs}
        files["README.md"] = render("README.md.j2", op=op, framework=target.name, name=name, entries=entries,
                                    files=sorted(files), register=target.custom_layer_registration(op, name)).encode()
        for rel, content in sorted(files.items()):
            atomic_write_bytes(out_dir / folder / rel, content)
        listed = sorted(f"{folder}/{rel}" for rel in files)
        for e, each in zip(entries, group):
            results.append({"node": each.node, "op": each.qualified, "layer": name, "framework": target.name,
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
