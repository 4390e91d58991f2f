"""Write the ``.tnnproto`` text exactly as TNN's ``ModelInterpreter::InterpretProto`` reads it.

Layout (model_interpreter.cc:174-398, written like model_packer.cc:82-165): every record is one
quoted line ending in ``,``; record 0 ``1 <blob count> 1 <magic>``, record 1 the inputs
(``name ndims d0 .. data_type`` separated by ``:``), record 2 all blob names, record 3 the output
names, record 4 the layer count, then one record per layer:
``<Type> <name> <n_in> <n_out> <inputs..> <outputs..> <params..>``.
"""

from __future__ import annotations

import numpy as np

from .layer_types import MAGIC_V2
from .net import TnnLayer, TnnNet


def format_param(value) -> str:
    """Ints as ints; floats with 9 significant digits, so ``atof`` restores the float32 exactly."""
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, str):  # e.g. Einsum's equation, already free of ' ', ',' and '"'
        return value
    return f"{float(np.float32(value)):.9g}"


def layer_line(layer: TnnLayer) -> str:
    tokens = [layer.type, layer.name, str(len(layer.inputs)), str(len(layer.outputs)),
              *layer.inputs, *layer.outputs, *(format_param(p) for p in layer.params)]
    return " ".join(tokens)


def proto_text(net: TnnNet) -> str:
    blobs = net.blobs()
    inputs = " : ".join(
        " ".join([i.name, str(len(i.shape)), *(str(d) for d in i.shape), str(i.data_type)]) for i in net.inputs
    )
    records = [
        f"1 {len(blobs)} 1 {MAGIC_V2}",
        inputs,
        " " + " ".join(blobs),
        " ".join(net.outputs),
        f" {len(net.layers)}",
        *(layer_line(layer) for layer in net.layers),
    ]
    return "".join(f'"{record} ,"\n' for record in records)
