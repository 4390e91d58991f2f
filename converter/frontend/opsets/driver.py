"""Node by node to the canonical opset: each node's operator version, then its adapter, its
compatible schema, or one line saying why not.

The operator version of a node is the ``since_version`` of its schema in force at the model's
opset (``Pad`` in an opset-20 model is Pad-19).  Three cases:

* an adapter is registered for that version (:data:`~converter.frontend.opsets.base.ADAPTERS`): it runs;
* the versions between the node's and the canonical one changed nothing a node can use
  differently (:func:`compatible`): types added or removed, attributes added whose default is
  the earlier behaviour (a node setting one to anything else is refused, naming it); the node
  stays, and its tensor types must be ones the canonical version takes;
* otherwise the node is refused: ``Attention-23 has no opset-17 form``.

Steps that kept the signature but changed the meaning (:data:`CHANGED_MEANING`, from onnx's
Changelog) never count as compatible.
"""

from __future__ import annotations

import functools

import onnx
import onnx_graphsurgeon as gs

from ...errors import BadInput, Unsupported
from ...ir.graph import CANONICAL_IR_VERSION, CANONICAL_OPSET, NameAllocator, Provenance, model_opset
from ...legalize.rewrites.base import Rewrite
from .base import ADAPTERS, NeedsValues, Unadaptable, check_types

#: The oldest opset edgeconv reads (the ONNX model zoo's oldest models are opset 7).
OLDEST_OPSET = 7

#: Operator versions whose signature equals the previous version's but whose meaning changed
#: (onnx docs/Changelog.md): an adapter must look at them.
CHANGED_MEANING = frozenset({
    ("Pad", 19),              # mode 'wrap' added
    ("Resize", 19),           # coordinate_transformation_mode 'half_pixel_symmetric' added
    ("ScatterND", 18),        # reduction 'max' and 'min' added
    ("ScatterElements", 18),  # reduction 'max' and 'min' added
    ("Mod", 28),              # fmod=0 defined for floats
    ("Upsample", 10),         # deprecated: Resize
    ("Scatter", 11),          # deprecated: ScatterElements
})


def adapt_to_canonical(model: onnx.ModelProto, fold=None) -> gs.Graph:
    """The model as a graph at the canonical opset (shapes inferred at its own opset first, so
    that adapters see ranks and types).  ``fold(graph) -> graph``: constant folding, tried when
    an adapter lacked a rank, a shape or a constant (normalization passes its own)."""
    from ...ir import light_model
    from ...ir.graph import to_graph
    from .dtypes import refuse_new_types

    opset = model_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise BadInput(f"model uses opset {opset}, newer than this onnx/onnxruntime supports (max {newest})")
    if opset < OLDEST_OPSET:
        raise Unsupported(f"model uses opset {opset}; edgeconv reads opset {OLDEST_OPSET} to {newest}")
    if opset == CANONICAL_OPSET:
        return _stamp_canonical(to_graph(model))
    refuse_new_types(model)
    try:
        model = light_model.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - adapters that need a shape say so themselves
        pass
    graph = to_graph(model)
    problems = adapt_graph(graph, opset)
    if fold is not None and any(needs for _, needs in problems):
        # a rank, shape or constant only constant folding reveals (a Reshape whose target is
        # computed from Shape): fold at the model's own opset, then adapt again
        graph = fold(to_graph(model))
        problems = adapt_graph(graph, opset)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Unsupported(f"{problems[0][0]}{more}")
    return _stamp_canonical(graph)


def _stamp_canonical(graph: gs.Graph) -> gs.Graph:
    """The graph imports the canonical opset, at the IR version that goes with it or newer (old
    models of IR 3 demand every initializer be a graph input, which normalization drops)."""
    graph.opset = CANONICAL_OPSET
    domains = [d for d in graph.import_domains or [] if d.domain not in ("", "ai.onnx")]
    graph.import_domains = [onnx.helper.make_opsetid("", CANONICAL_OPSET), *domains]
    graph.ir_version = max(graph.ir_version or 0, CANONICAL_IR_VERSION)
    return graph


def adapt_graph(graph: gs.Graph, opset: int) -> list[tuple[str, bool]]:
    """Every node of ``graph`` (and of its subgraphs) from ``opset`` to the canonical opset, in
    place; returns one line per node that has no canonical form, with whether a rank, shape or
    constant it lacked may settle it (:class:`~.base.NeedsValues`)."""
    names = NameAllocator(graph)
    prior = graph.__dict__.get("provenance")
    graph.provenance = Provenance()  # adapters' nodes are renamed by normalization: no record
    problems: list[tuple[str, bool]] = []
    for sub in _graphs_of(graph):
        sub.opset = CANONICAL_OPSET  # what the Rewrite helpers emit for
        for node in list(sub.nodes):
            try:
                _adapt_node(sub, node, opset, names)
            except Unadaptable as why:
                version = _version(node.op, opset, True)
                problems.append((f"node '{node.name or node.op}' ({node.op}{f'-{version}' if version else ''}, "
                                 f"opset {opset}) cannot be brought to opset {CANONICAL_OPSET}: {why}",
                                 isinstance(why, NeedsValues)))
        sub.cleanup(remove_unused_graph_inputs=False).toposort()
    graph.provenance = prior if prior is not None else Provenance()
    return problems


def _graphs_of(graph: gs.Graph):
    yield graph
    for node in list(graph.nodes):
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, gs.Graph):
                    yield from _graphs_of(sub)


def _adapt_node(graph: gs.Graph, node: gs.Node, opset: int, names: NameAllocator) -> None:
    if node.domain not in ("", "ai.onnx", None):
        return
    version = _version(node.op, opset, deprecated=True)
    if version is None:
        raise Unadaptable(f"onnx knows no operator {node.op} at opset {opset}")
    target = _version(node.op, CANONICAL_OPSET)
    found = ADAPTERS.get((node.op, version))
    if found is not None:
        _apply(found, graph, node, names)
        return
    if version == target:
        return
    if target is None:
        raise Unadaptable(f"{node.op} has no opset-{CANONICAL_OPSET} form in edgeconv")
    if not compatible(node.op, version, target):
        raise Unadaptable(f"no adapter from {node.op}-{version} to {node.op}-{target}")
    _within_signature(node, target)
    _drop_added_attributes(node, version)
    check_types(node, target)


def _apply(found, graph: gs.Graph, node: gs.Node, names: NameAllocator) -> None:
    """Run an adapter: it edits ``node`` in place, or emits nodes (the last writing into the
    node's outputs), after which ``node`` leaves the graph."""
    rw = Rewrite(graph, node, found.name, names)
    found.fn(rw, node)
    if rw.new_nodes:
        node.inputs.clear()
        node.outputs.clear()


@functools.cache
def _schema(op: str, opset: int, deprecated: bool = False):
    """The schema of ``op`` in force at ``opset``; a deprecated one only with ``deprecated``."""
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None
    return None if schema.deprecated and not deprecated else schema


def _version(op: str, opset: int, deprecated: bool = False) -> int | None:
    schema = _schema(op, opset, deprecated)
    return None if schema is None else schema.since_version


@functools.cache
def _versions(op: str) -> tuple[int, ...]:
    return tuple(sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                         if s.name == op and s.domain in ("", "ai.onnx")}))


@functools.cache
def compatible(op: str, version: int, target: int) -> bool:
    """Whether every schema step between ``version`` and ``target`` keeps what a node of the
    older one means: inputs and outputs the same or only made optional or appended as optional,
    no attribute removed or given a new default, and not a step that changed the meaning
    (:data:`CHANGED_MEANING`).  A node of a newer version must then not use what it appended
    (:func:`_within_signature`)."""
    low, high = min(version, target), max(version, target)
    steps = [v for v in _versions(op) if low <= v <= high]
    for before, after in zip(steps, steps[1:]):
        if (op, after) in CHANGED_MEANING:
            return False
        a, b = onnx.defs.get_schema(op, before, ""), onnx.defs.get_schema(op, after, "")
        if not (_relaxed(a.inputs, b.inputs) and _relaxed(a.outputs, b.outputs)):
            return False
        for name, old in a.attributes.items():
            new = b.attributes.get(name)
            if new is None or new.default_value.SerializeToString() != old.default_value.SerializeToString():
                return False
    return True


def _relaxed(before, after) -> bool:
    """``after``'s formal parameters are ``before``'s, some made optional, optional ones appended."""
    single, optional = onnx.defs.OpSchema.FormalParameterOption.Single, onnx.defs.OpSchema.FormalParameterOption.Optional
    if len(after) < len(before) or any(p.option != optional for p in after[len(before):]):
        return False
    return all(a.option == b.option or (a.option == single and b.option == optional) for a, b in zip(before, after))


def _within_signature(node: gs.Node, target: int) -> None:
    """A node of a newer version uses no input or output the canonical version lacks."""
    schema = onnx.defs.get_schema(node.op, target, "")
    for kind, tensors, most in (("input", node.inputs, schema.max_input), ("output", node.outputs, schema.max_output)):
        used = [i for i, t in enumerate(tensors) if t.name]
        if used and used[-1] >= most:
            raise Unadaptable(f"{kind} {used[-1]} ('{tensors[used[-1]].name}') has no opset-{CANONICAL_OPSET} form")


def _drop_added_attributes(node: gs.Node, version: int) -> None:
    """Attributes the canonical version lacks (added later): dropped when they hold their
    default, which is the earlier behaviour (:func:`compatible`), refused otherwise."""
    schema = _schema(node.op, CANONICAL_OPSET)
    own = onnx.defs.get_schema(node.op, version, "")
    for name in [a for a in node.attrs if a not in schema.attributes]:
        proto = own.attributes.get(name)
        default = onnx.helper.get_attribute_value(proto.default_value) if proto and proto.default_value.name else None
        value = node.attrs[name]
        if _same(value, default) or (default is None and name in _ONES_WHEN_ABSENT and set(value) == {1}):
            del node.attrs[name]
        else:
            raise Unadaptable(f"attribute {name}={_shown(value)} has no opset-{CANONICAL_OPSET} form")


#: Attributes without a default whose absence means all ones (pooling ``dilations``).
_ONES_WHEN_ABSENT = frozenset({"dilations"})


def _same(value, default) -> bool:
    if isinstance(default, bytes):
        default = default.decode()
    if isinstance(value, bytes):
        value = value.decode()
    return value == default


def _shown(value) -> str:
    return value.decode() if isinstance(value, bytes) else repr(value)
