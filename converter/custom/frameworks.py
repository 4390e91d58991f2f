"""Per-framework scaffold files around the shared kernel: one function per framework.

Each returns ``{relative path: bytes}`` for one op type (``ops`` = every node of that type) and
the name the exported model uses for the layer.  The exporters use the same names
(``layer_name``) and the same attribute encodings (``converter/targets/<t>/custom.py``).
"""

from __future__ import annotations

from .scaffold import node_dir, number, render
from .spec import CustomOp

#: TNN LayerType value suggested for the new enum entry (TNN's own values stay below 1000).
TNN_ENUM_BASE = 9000


def layer_name(framework: str, op: CustomOp) -> str:
    """The custom op/layer type string written into the framework's model file."""
    return "Custom" + op.symbol if framework == "tnn" else op.symbol


def tflite_files(ops: list[CustomOp]) -> dict[str, bytes]:
    from ..targets.tflite.custom import custom_options

    op = ops[0]
    files = {f"{op.slug}_tflite.cc": render("tflite_op.cc.j2", op=op, name=layer_name("tflite", op),
                                                  fixed_inputs=len({len(o.inputs) for o in ops}) == 1).encode()}
    for each in ops:  # the exact custom_options bytes the .tflite holds, for the harness
        files[f"data/{node_dir(each.node)}/tflite_custom_options.bin"] = custom_options(each.attrs)
    return files


def tnn_param_doc(op: CustomOp) -> str:
    parts = []
    for name, kind in op.kinds.items():
        parts.append(f"<{name}>" if kind in ("int", "float", "string") else f"<{name}_count> <{name}...>")
    return " ".join(parts) or "(no parameters)"


def tnn_files(ops: list[CustomOp]) -> dict[str, bytes]:
    op = ops[0]
    name = layer_name("tnn", op)
    ctx = dict(op=op, name=name, enum=f"LAYER_{name.upper()}", enum_value=TNN_ENUM_BASE, param_doc=tnn_param_doc(op))
    return {
        f"tnn/{op.slug}_layer_param.h": render("tnn_layer_param.h.j2", **ctx).encode(),
        f"tnn/{op.slug}_layer.cc": render("tnn_layer.cc.j2", **ctx).encode(),
        f"tnn/{op.slug}_layer_interpreter.cc": render("tnn_layer_interpreter.cc.j2", **ctx).encode(),
        f"tnn/cpu_{op.slug}_layer_acc.cc": render("tnn_cpu_acc.cc.j2", **ctx).encode(),
        f"tnn/arm_{op.slug}_layer_acc.cc": render("tnn_arm_acc.cc.j2", **ctx).encode(),
    }


def mace_files(ops: list[CustomOp]) -> dict[str, bytes]:
    op = ops[0]
    return {f"mace/{op.slug}_op.cc": render("mace_op.cc.j2", op=op, name=layer_name("mace", op), number=number).encode()}


_COMPOSITES = {
    "GridSample": ("coreml_composite_gridsample.py.j2",
                   "GridSample maps to one MIL `resample` op (iOS 15+), as coremltools' torch frontend does."),
    "Einsum": ("coreml_composite_einsum.py.j2",
               "MIL `einsum` covers only `nchw,nwhu->nchu`-style two-operand equations; other equations have none."),
}


def coreml_files(ops: list[CustomOp]) -> dict[str, bytes]:
    op = ops[0]
    name = layer_name("coreml", op)
    composite = _COMPOSITES.get(op.op) if not op.domain else None
    note = composite[1] if composite else (f"MIL has no op for {op.qualified}; an ML Program cannot "
                                           "carry it at all, so CoreML needs the NeuralNetwork custom layer.")
    files = {
        "coreml/README.md": render("coreml_README.md.j2", op=op, name=name, composite=bool(composite),
                                   composite_note=note).encode(),
        f"coreml/{name}CustomLayer.swift": render("coreml_layer.swift.j2", op=op, name=name).encode(),
        f"coreml/{name}Bridge.mm": render("coreml_bridge.mm.j2", op=op, name=name).encode(),
    }
    if composite:
        files[f"coreml/{op.slug}_mil.py"] = render(composite[0], op=op).encode()
    return files


FILES = {"tflite": tflite_files, "tnn": tnn_files, "mace": mace_files, "coreml": coreml_files}
