"""Shape inference and structure checks without serializing the weights.

``onnx.shape_inference.infer_shapes`` and ``onnx.checker.check_model`` take a ``ModelProto`` but
work on its serialized bytes: for a ResNet-18 (45 MB of weights) each call spends ~0.07 s in
``SerializeToString`` alone, and a port made six such calls.  Neither needs the weight values:
inference reads only an initializer's type and shape, except for the small integer tensors that
data propagation folds (shapes, axes, pads).  So both run on a *light* copy whose large floating
point initializers are graph inputs of the same type and shape; inferred shapes are copied back.

    inferred = infer_shapes(model, data_prop=True)   # a new model, like onnx's
    check_structure(model)                           # onnx.checker on everything but the weights
"""

from __future__ import annotations

import onnx

from .weights import copy_fields

#: Floating-point initializers with more elements than this become typed inputs in the light
#: copy; smaller ones (and every integer tensor) stay, so data propagation still sees them.
MAX_KEPT_ELEMENTS = 64
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                onnx.TensorProto.DOUBLE}


def _is_weight(tensor: onnx.TensorProto) -> bool:
    from .weights import is_reference

    if is_reference(tensor):  # a weight store's (>= 1 MiB): no pass reads its values
        return True
    if tensor.data_type not in _FLOAT_TYPES:
        return False
    count = 1
    for d in tensor.dims:
        count *= d
    return count > MAX_KEPT_ELEMENTS


def light_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """(a copy of ``model`` whose weights are typed graph inputs, the input names added)."""
    moved = {t.name for t in model.graph.initializer if _is_weight(t)}
    light = onnx.ModelProto()
    if not moved:
        light.CopyFrom(model)
        return light, []
    copy_fields(model, light, skip=("graph",))
    copy_fields(model.graph, light.graph, skip=("initializer",))
    light.graph.initializer.extend(t for t in model.graph.initializer if t.name not in moved)
    declared = {i.name for i in model.graph.input}
    added = []
    for t in model.graph.initializer:
        if t.name in moved and t.name not in declared:  # IR >= 4: initializers need not be inputs
            light.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            added.append(t.name)
    return light, added




def infer_shapes(model: onnx.ModelProto, *, in_place: bool = False, **kwargs) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **kwargs)``, serializing no weights: a new
    model equal to what onnx returns (the original's inputs and initializers, in their order).

    ``in_place=True`` (for a model the caller drops afterwards) puts the inferred graph into
    ``model`` itself and returns it: the weights are never copied (they would be, once, into a
    new model -- a second copy of every weight while both exist)."""
    light, added = light_copy(model)
    inferred = onnx.shape_inference.infer_shapes(light, **kwargs)
    if len(light.graph.initializer) == len(model.graph.initializer):
        return inferred
    if in_place:
        _adopt(inferred, model, set(added))
        return model
    result = onnx.ModelProto()
    copy_fields(inferred, result, skip=("graph",))
    copy_fields(inferred.graph, result.graph, skip=("initializer", "input", "value_info"))
    result.graph.input.extend(model.graph.input)
    result.graph.initializer.extend(model.graph.initializer)
    added_names = set(added)
    result.graph.value_info.extend(v for v in inferred.graph.value_info if v.name not in added_names)
    return result


def _adopt(inferred: onnx.ModelProto, model: onnx.ModelProto, added_names: set[str]) -> None:
    """Make ``model`` equal to the model :func:`infer_shapes` builds, keeping its own inputs and
    initializers (every other field replaced by ``inferred``'s)."""
    for descriptor, _ in model.ListFields():
        if descriptor.name != "graph":
            model.ClearField(descriptor.name)
    copy_fields(inferred, model, skip=("graph",))
    for descriptor, _ in model.graph.ListFields():
        if descriptor.name not in ("initializer", "input"):
            model.graph.ClearField(descriptor.name)
    copy_fields(inferred.graph, model.graph, skip=("initializer", "input", "value_info"))
    model.graph.value_info.extend(v for v in inferred.graph.value_info if v.name not in added_names)


def on_light_copy(model: onnx.ModelProto, transform) -> onnx.ModelProto:
    """``transform(model)`` run on the light copy, the weights put back afterwards: for
    whole-model passes that read no weight values (the opset converter), so that they never
    serialize, parse and copy the weights (five copies of them at once for the converter)."""
    light, added = light_copy(model)
    out = transform(light)
    if len(light.graph.initializer) == len(model.graph.initializer):
        return out
    added_names = set(added)
    result = onnx.ModelProto()
    copy_fields(out, result, skip=("graph",))
    copy_fields(out.graph, result.graph, skip=("initializer", "input"))
    result.graph.input.extend(i for i in out.graph.input if i.name not in added_names)
    transformed = {t.name: t for t in out.graph.initializer}
    for tensor in model.graph.initializer:  # the original order, then what the pass added
        result.graph.initializer.append(transformed.pop(tensor.name, tensor))
    result.graph.initializer.extend(transformed.values())
    return result


def check_structure(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_model`` on the light copy: every node, type and opset is checked;
    the large weights' bytes are not (load checked them, or an exporter wrote them)."""
    onnx.checker.check_model(light_copy(model)[0])


#: Initializers at least this big are handed to onnxruntime as arrays, not serialized.
MIN_IN_MEMORY_BYTES = 4096
#: Element types numpy and onnxruntime's OrtValue share (bfloat16 and the float8s stay inline).
_IN_MEMORY_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
                    onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL}


def without_weight_bytes(model: onnx.ModelProto, min_bytes: int = MIN_IN_MEMORY_BYTES, options=None):
    """(serialized model whose large initializers are external-data stubs, {name: array}).

    onnxruntime's ``SessionOptions.add_external_initializers`` supplies the arrays for the stubs,
    so a session never needs the 45 MB of a ResNet-18 serialized into one more bytes object.
    With the session's ``options``, weight-store references read from a file stay external data
    in that file (:class:`converter.ir.weights.SessionWeights`: onnxruntime maps it; the OrtValues
    it needs for the rest are among the arrays returned)."""
    import numpy as np

    from .weights import SessionWeights, array_of, is_reference

    plan = SessionWeights() if options is not None else None

    shell = onnx.ModelProto()
    copy_fields(model, shell, skip=("graph",))
    copy_fields(model.graph, shell.graph, skip=("initializer",))
    arrays = {}
    for index, tensor in enumerate(model.graph.initializer):
        if plan is not None and is_reference(tensor):
            shell.graph.initializer.append(plan.stub(tensor, index))
            continue
        stored = array_of(tensor)
        if stored is not None:  # held by a weight store: that very array
            stub = shell.graph.initializer.add()
            stub.CopyFrom(tensor)
            del stub.external_data[:]
            stub.external_data.add(key="location", value=f"edgeconv-in-memory:{len(arrays)}")
            arrays[tensor.name] = stored if stored.flags.c_contiguous else np.ascontiguousarray(stored)
            continue
        raw = tensor.raw_data if tensor.data_location != onnx.TensorProto.EXTERNAL else b""
        if len(raw) < min_bytes or tensor.data_type not in _IN_MEMORY_TYPES:
            shell.graph.initializer.append(tensor)
            continue
        stub = shell.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                                           data_location=onnx.TensorProto.EXTERNAL)
        stub.external_data.add(key="location", value=f"edgeconv-in-memory:{len(arrays)}")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        arrays[tensor.name] = np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.dims))
    if plan is not None:
        arrays.update(plan.arrays)
        plan.configure(options)
    return shell.SerializeToString(), arrays
