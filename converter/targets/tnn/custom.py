"""A custom-layer node (remedy 4) as a TNN layer line of its own type.

The line is ``<Custom<Op>> <name> <n_in> <n_out> <inputs> <outputs> <params>``; the params are
the ONNX attributes in name order, parsed by the generated layer interpreter
(``templates/tnn_layer_interpreter.cc.j2``): numbers as themselves, strings
percent-encoded (TNN splits records on ',' and fields on ' ', model_interpreter.cc:174-300),
lists as ``<count> <values...>``.  The layer has no .tnnmodel resource.
"""

from __future__ import annotations

from typing import Any


def layer_params(attrs: dict[str, Any]) -> list[str]:
    from ...custom.scaffold import number, token

    params: list[str] = []
    for _, value in sorted(attrs.items()):
        if isinstance(value, list):
            params.append(str(len(value)))
            params += [str(v) if isinstance(v, int) else number(v) for v in value]
        elif isinstance(value, str):
            params.append(token(value))
        else:
            params.append(str(value) if isinstance(value, int) else number(value))
    return params


def convert_custom(ctx, node, layer: str, attrs: dict[str, Any]) -> None:
    """Emit ``node`` through TNN's ``ExportContext`` as one ``layer`` line."""
    ctx.emit(layer, [ctx.blob(t) for t in node.inputs if t.name], [ctx.blob(t) for t in node.outputs],
             layer_params(attrs))


#: TNN LayerType value suggested for the new enum entry (TNN's own values stay below 1000).
TNN_ENUM_BASE = 9000
REGISTRATION = ("Copy `tnn/*` into TNN (layer + interpreter under source/tnn/layer and "
                "source/tnn/interpreter/tnn/layer_interpreter, accs under source/tnn/device/cpu|arm/acc), "
                "add `LAYER_{upper} = 9000` to `LayerType` (source/tnn/core/layer_type.h) and "
                "`{{\"{name}\", LAYER_{upper}}}` to `global_layer_type_map` (layer_type.cc).")


def layer_name(op) -> str:
    """The layer type string of a custom op in the .tnnproto."""
    return "Custom" + op.symbol


def param_doc(op) -> str:
    parts = []
    for name, kind in op.kinds.items():
        parts.append(f"<{name}>" if kind in ("int", "float", "string") else f"<{name}_count> <{name}...>")
    return " ".join(parts) or "(no parameters)"


def scaffold_files(ops, name: str) -> dict[str, bytes]:
    """The TNN layer, its interpreter and its CPU/ARM accs for one custom op type."""
    from pathlib import Path

    from ...custom.scaffold import render

    op = ops[0]
    ctx = dict(op=op, name=name, enum=f"LAYER_{name.upper()}", enum_value=TNN_ENUM_BASE, param_doc=param_doc(op))
    here = Path(__file__).with_name("templates")
    return {
        f"tnn/{op.slug}_layer_param.h": render("tnn_layer_param.h.j2", here, **ctx).encode(),
        f"tnn/{op.slug}_layer.cc": render("tnn_layer.cc.j2", here, **ctx).encode(),
        f"tnn/{op.slug}_layer_interpreter.cc": render("tnn_layer_interpreter.cc.j2", here, **ctx).encode(),
        f"tnn/cpu_{op.slug}_layer_acc.cc": render("tnn_cpu_acc.cc.j2", here, **ctx).encode(),
        f"tnn/arm_{op.slug}_layer_acc.cc": render("tnn_arm_acc.cc.j2", here, **ctx).encode(),
    }
