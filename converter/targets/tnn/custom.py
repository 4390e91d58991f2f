"""A custom-layer node (remedy 4) as a TNN layer line of its own type.

The line is ``<Custom<Op>> <name> <n_in> <n_out> <inputs> <outputs> <params>``; the params are
the ONNX attributes in name order, parsed by the generated layer interpreter
(``converter/custom`` ``tnn_layer_interpreter.cc.j2``): numbers as themselves, strings
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
