"""A custom-layer node (remedy 4) as a TFLite CUSTOM operator.

The operator's code is ``BuiltinOperator.CUSTOM`` with ``custom_code`` = the layer name, and its
attributes travel as ``custom_options``: a FlexBuffer map (schema.fbs ``CustomOptionsFormat
FLEXBUFFERS``, the only format the schema defines), written with the ``flatbuffers`` package's
own FlexBuffers builder; TFLite passes these bytes to the kernel's ``Init(context, buffer,
length)`` (``tensorflow/lite/core/c/common.h`` TfLiteRegistration).  Inputs and outputs stay in
the ONNX layout, which the generated kernel (``converter/custom``) computes in.

Two steps, so the writer needs no change: :func:`lower_custom` (the driver's custom-layer hook)
writes the node as a ``CUSTOM`` op during lowering, and :func:`finish_custom` sets each CUSTOM
operator's own OperatorCode (custom_code) and custom_options in the serialized model, found by the
operator's output name.
"""

from __future__ import annotations

from typing import Any

from . import layout as L

CUSTOM_OPTIONS_FLEXBUFFERS = 0  # schema.fbs CustomOptionsFormat


def custom_options(attrs: dict[str, Any]) -> bytes:
    """The FlexBuffer map of the node's attributes (keys sorted, as FlexBuffers maps are)."""
    from flatbuffers import flexbuffers

    return bytes(flexbuffers.Dumps(dict(sorted(attrs.items()))))


def lower_custom(Lw, node, layer: str, attrs: dict[str, Any]) -> None:
    """Write ``node`` as a CUSTOM op; records ``{first output name: (custom_code, options)}`` in
    ``Lw.customs`` for :func:`finish_custom`."""
    inputs = [Lw.get(t, L.identity(Lw.rank(t))) for t in node.inputs if t.name]
    outputs = [Lw.define(t, L.identity(Lw.rank(t))) for t in node.outputs]
    Lw.emit("CUSTOM", inputs, outputs)
    Lw.customs[Lw.w.tensors[outputs[0]].name] = (layer, custom_options(attrs))


def finish_custom(data: bytes, customs: dict[str, tuple[str, bytes]]) -> bytes:
    """Give every CUSTOM operator of ``data`` its custom_code and custom_options."""
    if not customs:
        return data
    from ._generated import schema_generated as fb
    from .writer import AlignedBuffer  #  (keeps the 16-byte buffer alignment)
    import flatbuffers

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
    codes = list(model.operatorCodes)
    used: dict[int, None] = {}
    by_code: dict[str, int] = {}
    for sub in model.subgraphs:
        for op in sub.operators:
            if codes[op.opcodeIndex].builtinCode != fb.BuiltinOperator.CUSTOM:
                used.setdefault(op.opcodeIndex)
                continue
            name = sub.tensors[op.outputs[0]].name
            name = name.decode() if isinstance(name, bytes) else name
            layer, options = customs[name]
            if layer not in by_code:
                oc = fb.OperatorCodeT()
                oc.builtinCode = oc.deprecatedBuiltinCode = fb.BuiltinOperator.CUSTOM
                oc.customCode = layer
                oc.version = 1
                by_code[layer] = len(codes)
                codes.append(oc)
            op.opcodeIndex = by_code[layer]
            used.setdefault(op.opcodeIndex)
            op.customOptions = list(options)
            op.customOptionsFormat = CUSTOM_OPTIONS_FLEXBUFFERS
    order = sorted(used)  # drop the placeholder CUSTOM code the writer shared between them
    remap = {old: new for new, old in enumerate(order)}
    model.operatorCodes = [codes[i] for i in order]
    for sub in model.subgraphs:
        for op in sub.operators:
            op.opcodeIndex = remap[op.opcodeIndex]
    model.buffers = [AlignedBuffer(bytes(b.data) if b.data is not None else b"") for b in model.buffers]
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


#: How an app registers the generated op (the scaffold's README).
REGISTRATION = ("Add `{op}_tflite.cc` to the app and call `resolver.AddCustom(\"{name}\", "
                "edgeconv_custom::Register_{symbol}())` on the `tflite::MutableOpResolver` "
                "(e.g. `BuiltinOpResolver`) before `InterpreterBuilder`. Compile with "
                "`-DEDGECONV_HARNESS_TFLITE` to run the harness through the TfLiteRegistration too.")


def scaffold_files(ops, name: str) -> dict[str, bytes]:
    """The TFLite wrapper of one custom op type (every node of it in ``ops``)."""
    from pathlib import Path

    from ...custom.scaffold import node_dir, render

    op = ops[0]
    files = {f"{op.slug}_tflite.cc": render("tflite_op.cc.j2", Path(__file__).with_name("templates"), op=op,
                                            name=name, fixed_inputs=len({len(o.inputs) for o in ops}) == 1).encode()}
    for each in ops:  # the exact custom_options bytes the .tflite holds, for the harness
        files[f"data/{node_dir(each.node)}/tflite_custom_options.bin"] = custom_options(each.attrs)
    return files
