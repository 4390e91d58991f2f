"""The safety net: an op that ONNX defines as a function is replaced by its function body
(exact: the body *is* the op's definition), so no such op becomes a custom layer while its body
runs on the target.

ONNX gives many ops a body of simpler ops (``onnx.defs``: ``OpSchema.has_function``, or
``has_context_dependent_function`` when the body depends on the input types and attributes):
Selu, Softsign, Shrink, ThresholdedRelu, Celu, MeanVarianceNormalization, GreaterOrEqual, … .
Each gets a rule ``inline_<op>_function``; the planner tries it like any other rule (after the
hand-written ones, which cost less), and every node it emits is checked by the matrix and, if
rejected, rewritten in turn.  The body is built for the node's own attributes, input types and the
model's opset (a body written for a later opset is converted down with onnx's version
converter), then constant-folded on the node's static shapes (CastLike of a constant, Shape of a
static tensor) before its nodes are spliced in.  Random ops (Bernoulli) and bodies with
subgraphs are declined.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from ...ir.graph import CANONICAL_OPSET
from .base import opset_of, rule

#: Ops whose function is not a deterministic inference computation, and DynamicQuantizeLinear,
#: whose body (onnx 1.17+) returns its scale and zero point with shape [1] where the op's are scalars.
SKIP = frozenset({"Bernoulli", "SequenceMap", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss",
                  "DynamicQuantizeLinear"})
#: Added to a function rule's cost: a hand-written rule emitting as many ops is preferred.
PENALTY = 2
#: The opset the registration builds a representative body at: edgeconv's canonical opset, which
#: normalization converts every model to (an op of a later opset gets no rule).
REPRESENTATIVE_OPSET = CANONICAL_OPSET


def _pick(versions, opset: int) -> int | None:
    """The body version for ``opset``: the latest at or below it, else the earliest after it."""
    below = [v for v in versions if v <= opset]
    return max(below) if below else (min(versions) if versions else None)


def _elem_type(dtype) -> int:
    """The ONNX element type of a gs dtype (a numpy dtype, or an ONNX type number for types numpy
    lacks, such as bfloat16)."""
    if isinstance(dtype, (int, np.integer)):
        return int(dtype)
    return helper.np_dtype_to_tensor_dtype(np.dtype(np.float32 if dtype is None else dtype))


def _type_proto(t: gs.Tensor):
    shape = None if t.shape is None else [d if isinstance(d, int) else None for d in t.shape]
    return helper.make_tensor_type_proto(_elem_type(t.dtype), shape)


def _node_proto(node: gs.Node, outputs) -> onnx.NodeProto:
    return helper.make_node(node.op, [t.name or "" for t in node.inputs], [t.name for t in outputs],
                            **{k: v for k, v in node.attrs.items()})


def function_body(node: gs.Node, opset: int, outputs=None) -> onnx.FunctionProto | str:
    """The op's function body for this node (``outputs``: its outputs, when the rewrite has
    detached them), or the reason there is none."""
    outputs = node.outputs if outputs is None else outputs
    if node.domain not in ("", "ai.onnx", None) or node.op in SKIP:
        return f"{node.op} has no deterministic ONNX function"
    try:
        schema = onnx.defs.get_schema(node.op, opset, "")
    except onnx.defs.SchemaError:
        return f"no {node.op} in opset {opset}"
    fp = onnx.FunctionProto()
    if schema.has_context_dependent_function:
        version = _pick(schema.context_dependent_function_opset_versions, opset)
        try:
            types = [_type_proto(t).SerializeToString() for t in node.inputs]
            fp.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                version, _node_proto(node, outputs).SerializeToString(), types))
        except Exception as err:  # noqa: BLE001  (onnx's builder rejects the context)
            return f"no {node.op} function body for these inputs ({str(err).splitlines()[0][:80]})"
    elif schema.has_function:
        body = schema.get_function_with_opset_version(_pick(schema.function_opset_versions, opset))
        fp.ParseFromString(body if isinstance(body, bytes) else body.SerializeToString())
    if not fp.node:
        return f"ONNX defines no function body for {node.op}"
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in fp.node for a in n.attribute):
        return f"the {node.op} function body has subgraphs"
    return fp


def _resolve_refs(fp: onnx.FunctionProto, node: gs.Node, opset: int) -> list[onnx.NodeProto]:
    """The body's nodes with ``@attr`` references replaced by the node's attributes (or the
    schema's defaults; a reference to neither is dropped, as ONNX does)."""
    schema = onnx.defs.get_schema(node.op, opset, "")
    out = []
    for body_node in fp.node:
        n = onnx.NodeProto()
        n.CopyFrom(body_node)
        kept = []
        for a in n.attribute:
            if not a.ref_attr_name:
                kept.append(a)
                continue
            if a.ref_attr_name in node.attrs:
                given = helper.make_attribute(a.name, node.attrs[a.ref_attr_name])
            else:
                default = schema.attributes[a.ref_attr_name].default_value
                given = None if default.type == onnx.AttributeProto.UNDEFINED else onnx.AttributeProto()
                if given is not None:
                    given.CopyFrom(default)
                    given.name = a.name
            if given is not None:
                kept.append(given)
        del n.attribute[:]
        n.attribute.extend(kept)
        out.append(n)
    return out


def _body_model(node: gs.Node, outputs, fp: onnx.FunctionProto, opset: int) -> onnx.ModelProto:
    """The body as a model: the node's inputs as inputs (constants as initializers), its used
    outputs as outputs, at the model's opset."""
    inputs, inits = [], []
    for name, t in zip(fp.input, node.inputs):
        if not t.name:
            continue
        if isinstance(t, gs.Constant):
            inits.append(onnx.numpy_helper.from_array(np.asarray(t.values), name))
        else:
            inputs.append(helper.make_value_info(name, _type_proto(t)))
    ends = [helper.make_value_info(name, onnx.TypeProto()) for name in fp.output[:len(outputs)]]
    graph = helper.make_graph(_resolve_refs(fp, node, opset), "body", inputs, ends, inits)
    body_opset = next((o.version for o in fp.opset_import if o.domain in ("", "ai.onnx")), opset)
    opsets = [helper.make_opsetid("", body_opset)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    if body_opset != opset:
        model = onnx.version_converter.convert_version(model, opset)
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model


def _folded(model: onnx.ModelProto) -> gs.Graph:
    """Shapes inferred, CastLike of known types made Cast, constants folded."""
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    graph = gs.import_onnx(model)
    for n in graph.nodes:
        if n.op == "CastLike" and n.inputs[1].dtype is not None:
            n.op, n.attrs = "Cast", {"to": _elem_type(n.inputs[1].dtype)}
            del n.inputs[1]
    graph.fold_constants(fold_shapes=True, error_ok=True).cleanup(remove_unused_graph_inputs=False).toposort()
    return graph


def inline_body(rw, node: gs.Node) -> None:
    fp = function_body(node, rw.opset, rw.outputs)
    body = _folded(_body_model(node, rw.outputs, fp, rw.opset))
    outer = dict(zip((t.name for t in body.inputs), (t for t in node.inputs if t.name)))
    finals = {t.name: rw.outputs[i] for i, t in enumerate(body.outputs)}
    made: dict[str, gs.Tensor] = {}

    def real(t):
        if isinstance(t, gs.Constant):
            return rw.const("c", np.asarray(t.values), dtype=np.asarray(t.values).dtype)
        if not t.name:
            return t
        return outer.get(t.name) or made[t.name]

    for n in body.nodes:
        outs = [finals.get(t.name) or gs.Variable(rw.names(f"{rw.node.name or rw.node.op}/{n.op.lower()}"),
                                                  dtype=t.dtype) for t in n.outputs]
        rw.emit(n.op, [real(t) for t in n.inputs], dict(n.attrs), outputs=outs)
        made.update({t.name: o for t, o in zip(n.outputs, outs)})
    for t in body.outputs:  # an output the folding made a constant or an input: copied
        if t.name not in made:
            rw.emit("Identity", [real(t)], outputs=[finals[t.name]])


def _inlinable(node, graph) -> str | None:
    if any(isinstance(t.dtype, (int, np.integer)) for t in list(node.inputs) + list(node.outputs)):
        return "a tensor of a type numpy lacks (float8, bfloat16): not folded exactly here"
    fp = function_body(node, opset_of(graph))
    if isinstance(fp, str):
        return fp
    try:
        _body_model(node, node.outputs, fp, opset_of(graph))
    except Exception as err:  # noqa: BLE001  (a body written for a later opset that does not convert down)
        return f"the {node.op} function body does not convert to opset {opset_of(graph)} ({str(err).splitlines()[0][-60:]})"
    return None


@cache
def representative_ops(op: str) -> tuple[str, ...]:
    """The ops of the body of ``op`` for float32 inputs of shape [2, 3, 4, 5] at
    :data:`REPRESENTATIVE_OPSET`, as the rule declares them to the planner's op-level search:
    Constant nodes become constants, CastLike a Cast (folded away on a constant); () if none.
    Not folded here (that needs onnxruntime): the trial on the real node checks what is really
    emitted."""
    opset = REPRESENTATIVE_OPSET
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:  # an op of a later opset: normalization brings models to 17
        return ()
    ins = [gs.Variable(f"i{k}", dtype=np.float32, shape=[2, 3, 4, 5]) for k in range(len(schema.inputs))]
    node = gs.Node(op, inputs=ins, outputs=[gs.Variable(f"o{k}") for k in range(schema.min_output)])
    fp = function_body(node, opset)
    if isinstance(fp, str):
        return ()
    ops = ("Cast" if n.op_type == "CastLike" else n.op_type for n in fp.node if n.op_type != "Constant")
    return tuple(dict.fromkeys(ops))


def _register(op: str, emits: tuple[str, ...]) -> None:
    def inline(rw, node):
        inline_body(rw, node)

    inline.__doc__ = (f"{op} as its ONNX function body (onnx.defs), inlined and folded.\n\n"
                      f"    before: x ─► {op} ─► y\n    after:  x ─► {' / '.join(emits)} ─► y\n")
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()
    rule(op, emits=list(emits), when=_inlinable, cost=len(emits) + PENALTY,
         name=f"inline_{snake}_function")(inline)


def _function_ops() -> list[str]:
    ops = set()
    for schema in onnx.defs.get_all_schemas():
        if schema.domain == "" and schema.name not in SKIP and \
                (schema.has_function or schema.has_context_dependent_function):
            ops.add(schema.name)
    return sorted(ops)


for _op in _function_ops():
    if representative_ops(_op) and _op not in representative_ops(_op):
        _register(_op, representative_ops(_op))
