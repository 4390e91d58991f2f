"""Bring any ONNX model to edgeconv's canonical form.

Canonical means: opset ``CANONICAL_OPSET`` (17), fixed input shapes where the user gave them,
shapes inferred for every tensor, constants folded (Constant nodes become initializers),
pass-throughs removed (Dropout, Identity, one-input Concat, unused initializers), nodes topologically
sorted, and every node and tensor given a stable unique name derived from the graph's structure
(so two exports of the same network normalize to the same names).  Graph inputs and outputs keep
their names: they are the model's interface.
"""

from __future__ import annotations


import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import BadInput
from ..ir.graph import CANONICAL_OPSET, to_graph, to_model, unique_name
from ..ir import light_model
from ..ir.memory import RELEASE_MIN_BYTES, release, weight_bytes

# Characters the edge formats cannot carry in a name (TNN splits on ',', '"', ' ' and ':').
_UNSAFE = str.maketrans({c: "_" for c in ' ,":;/\\()[]{}<>\'#'})


def normalize(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None) -> onnx.ModelProto:
    stash = _stash_large_weights(model)
    if stash:
        model = onnx.ModelProto.FromString(_light_copy(model))
    # The checker follows external-data references to files; stash references have none.
    model = _normalize(model, input_shapes, check=not stash)
    _restore_large_weights(model, stash)
    return model


# Models over protobuf's 2 GB limit cannot be serialized, and every pass below (version
# conversion, shape inference, the checker, constant folding in onnxruntime) serializes.  None
# of them needs the values of big weights, only their shapes and types, so big initializers are
# held aside as numbered "external data" references while the passes run (graphsurgeon carries
# such references through renames untouched) and put back afterwards.
LARGE_MODEL_BYTES = 1 << 30
_STASH_MIN_BYTES = 1 << 20
_STASH_LOCATION = "edgeconv-stash"


def _stash_large_weights(model: onnx.ModelProto) -> list[bytes]:
    """The raw bytes of the big initializers (in order), when the model is large at all."""
    if not is_large(model):
        return []
    return [t.raw_data for t in model.graph.initializer if len(t.raw_data) >= _STASH_MIN_BYTES]


def _light_copy(model: onnx.ModelProto) -> bytes:
    """``model`` serialized with each big initializer replaced by a numbered stash reference."""
    from ..ir.onnx_file import external_references

    stash_ref = lambda index, _raw: {"location": _STASH_LOCATION, "offset": index}  # noqa: E731
    with external_references(model, stash_ref, _STASH_MIN_BYTES):
        return model.SerializeToString()


def _restore_large_weights(model: onnx.ModelProto, stash: list[bytes]) -> None:
    if not stash:
        return
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        if info.get("location") != _STASH_LOCATION:
            continue
        tensor.raw_data = stash[int(info["offset"])]
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def is_large(model: onnx.ModelProto) -> bool:
    return weight_bytes(model) >= LARGE_MODEL_BYTES


def _normalize(model: onnx.ModelProto, input_shapes, check: bool = True) -> onnx.ModelProto:
    heavy = weight_bytes(model) >= RELEASE_MIN_BYTES
    graph = _to_canonical_opset(model)
    model = None  # the caller's model stays; the converted copy lives only as long as ``graph``
    _check_acyclic(graph)
    _drop_attributes_newer_than_opset(graph)
    if input_shapes:
        _fix_input_shapes(graph, input_shapes)
    _remove_passthrough(graph)
    # Constant nodes as initializers now (folding would make them the same tensors): a graph of
    # layers whose parameters were Constant nodes (torch exports Clip's bounds so) then has
    # nothing to fold and skips the fold (see _nothing_to_fold).  Big ones are left to folding,
    # which lists them as left unfolded.
    _inline_constant_nodes(graph, max_bytes=FOLD_LIMIT_BYTES)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    # gs folding evaluates constant subgraphs with onnxruntime and turns Constant nodes into
    # initializers; shapes must be inferred first so shape-only subgraphs fold too.
    graph, unfolded = _fold_to_fixpoint(graph, heavy)
    _inline_constant_nodes(graph)
    _drop_zero_adds(graph)
    _remove_passthrough(graph)
    _drop_needless_allowzero(graph)
    _short_prelu_slopes(graph)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    _rename(graph)
    release(heavy)  # graphsurgeon graphs are cyclic: free the ones above (and their weights) now
    if unfolded:
        graph.__dict__.setdefault("metadata", {})[UNFOLDED_NOTE_KEY] = unfolded_note(unfolded)
    model = _infer(to_model(graph, CANONICAL_OPSET))
    if check:
        light_model.check_structure(model)  # the weights' bytes were checked at load
    return model


#: Folded constants bigger than this stay computed in the graph (a ConstantOfShape of
#: [1e5, 1e5] would otherwise make normalization allocate 37 GiB).
FOLD_LIMIT_BYTES = 64 << 20
#: metadata_props key of the note listing constants left unfolded.
UNFOLDED_NOTE_KEY = "edgeconv.unfolded_constants"
#: Ops whose output size follows from their input *values* (not only shapes), and control flow
#: that runs a body an unknown number of times: never evaluated unless their size is known.
_GENERATORS = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "Reshape",
               "OneHot", "RandomNormal", "RandomUniform", "EyeLike"}
_CONTROL_FLOW = {"Loop", "Scan", "If", "SequenceMap"}


def _fold_constants(graph: gs.Graph, limit: int = FOLD_LIMIT_BYTES) -> list[str]:
    """Fold constant subgraphs whose tensors stay under ``limit`` bytes; returns the outputs of the
    nodes left unfolded because they are (or may be) bigger."""
    skipped: list[str] = []

    def too_big(node: gs.Node) -> bool:
        if node.op in _CONTROL_FLOW:
            skipped.append(f"{node.name or node.op} ({node.op}: runs a body)")
            return True
        for out in node.outputs:
            size = _known_bytes(out)
            if size is None and node.op in _GENERATORS:
                size = _generated_bytes(node)
            if (size is None and node.op in _GENERATORS) or (size is not None and size > limit):
                what = "size unknown" if size is None else f"{size / (1 << 20):.0f} MiB"
                skipped.append(f"{out.name} ({node.op}, {what})")
                return True
        return False

    if not _nothing_to_fold(graph):
        _load_stored_constants(graph)
        graph.fold_constants(error_ok=True, size_threshold=limit, should_exclude_node=too_big)
    graph.cleanup(remove_unused_graph_inputs=False)
    return list(dict.fromkeys(skipped))  # graphsurgeon asks about a node more than once


#: Ops graphsurgeon's folding rewrites even when no node has only constant inputs: Constant
#: nodes become tensors, Shape/Size of static shapes become constants, Cast pairs around shape
#: arithmetic are elided.
_FOLDING_OPS = frozenset({"Constant", "Shape", "Size", "Cast"})


def _nothing_to_fold(graph: gs.Graph) -> bool:
    """Whether ``graph.fold_constants`` would leave ``graph`` as it is: no node computable from
    constants alone (or without inputs), none of :data:`_FOLDING_OPS`, no subgraph or function.
    Folding first copies the whole graph (a third of a MobileNet's normalization), so a graph
    of weights and layers only (most exported CNNs once folded) skips it."""
    if getattr(graph, "functions", None):
        return False
    for node in graph.nodes:
        if node.op in _FOLDING_OPS or any(isinstance(v, gs.Graph) or (isinstance(v, list) and v and
                                                                      isinstance(v[0], gs.Graph))
                                          for v in node.attrs.values()):
            return False
        if all(isinstance(t, gs.Constant) for t in node.inputs if not t.is_empty()):
            return False
    return True


def _load_stored_constants(graph: gs.Graph) -> None:
    """Weight-store constants (converter/ir/weights.py) as their arrays: graphsurgeon's folding
    exports the subgraphs it evaluates, and onnxruntime cannot follow a store reference (an
    array exports as bytes; to_model turns it back into the same reference)."""
    from ..ir.graph import _StoredValues

    for tensor in graph.tensors().values():
        if isinstance(tensor, gs.Constant) and isinstance(tensor._values, _StoredValues):
            tensor.values  # noqa: B018 - loads the stored array (no copy)


def unfolded_note(skipped: list[str]) -> str:
    return (f"{len(skipped)} constant(s) left unfolded (over {FOLD_LIMIT_BYTES >> 20} MiB or of unknown size): "
            + ", ".join(skipped[:10]) + (" ..." if len(skipped) > 10 else ""))


def _known_bytes(tensor) -> int | None:
    shape, dtype = getattr(tensor, "shape", None), getattr(tensor, "dtype", None)
    if shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        return None
    try:
        itemsize = np.dtype(dtype).itemsize if dtype is not None else 4
    except TypeError:
        itemsize = 8
    return int(np.prod([int(d) for d in shape], dtype=np.float64)) * itemsize


def _generated_bytes(node: gs.Node) -> int | None:
    """Output bytes of a ConstantOfShape/Expand/Tile/Range from its constant inputs (upper bound
    with 8-byte elements), or None."""
    values = [np.asarray(t.values) if isinstance(t, gs.Constant) else None for t in node.inputs]
    try:
        if node.op == "ConstantOfShape" and values and values[0] is not None:
            return int(np.prod(values[0].astype(np.float64))) * 8
        if node.op == "Expand" and len(values) == 2 and values[1] is not None and node.inputs[0].shape is not None:
            dims = np.broadcast_shapes(tuple(int(d) if isinstance(d, (int, np.integer)) else 1
                                             for d in node.inputs[0].shape), tuple(values[1].astype(np.int64)))
            return int(np.prod(np.asarray(dims, dtype=np.float64))) * 8
        if node.op == "Tile" and len(values) == 2 and values[1] is not None and _known_bytes(node.inputs[0]):
            return int(_known_bytes(node.inputs[0]) * np.prod(values[1].astype(np.float64)))
        if node.op == "Range" and all(v is not None for v in values[:3]) and len(values) >= 3:
            start, limit, delta = (float(v) for v in values[:3])
            return int(max(0.0, np.ceil((limit - start) / delta)) if delta else 0) * 8
    except (ValueError, TypeError, OverflowError):
        return None


#: Ops whose presence means shape computations are still in the graph.
_SHAPE_OPS = frozenset({"Shape", "Size", "ConstantOfShape"})
#: Enough rounds for the deepest shape chains seen (Swin-T: 3); each round folds every chain
#: one inference step further.
_MAX_FOLD_ROUNDS = 8


def _fold_to_fixpoint(graph: gs.Graph, heavy: bool = False) -> tuple[gs.Graph, list[str]]:
    """Infer shapes and fold constants, again and again, until the graph stops shrinking; returns
    the graph and the constants left unfolded (:func:`_fold_constants`).

    One round is not enough when a shape computation feeds a Reshape (or Pad, Range, Expand)
    whose output shape inference cannot know until that computation is a constant: Swin's window
    partition computes ``H % window`` from ``Shape``, pads by it, reshapes by it, and the next
    ``Shape`` reads the padded tensor.  Each round makes the next link static; with fixed input
    shapes every such chain ends as constants.  Rounds stop as soon as no shape op and no tensor
    of unknown shape is left, or a round changes nothing."""
    size = None
    unfolded: list[str] = []
    for _ in range(_MAX_FOLD_ROUNDS):
        graph = to_graph(_infer(to_model(graph)))
        release(heavy)  # the previous round's graph (cyclic) and the weights it still held
        unfolded = _fold_constants(graph)  # the last round's list: what stays unfolded
        if len(graph.nodes) == size or not _has_shape_work(graph):
            break
        size = len(graph.nodes)
    return graph, unfolded


def _has_shape_work(graph: gs.Graph) -> bool:
    if any(node.op in _SHAPE_OPS for node in graph.nodes):
        return True
    return any(t.shape is None or any(not isinstance(d, int) for d in t.shape)
               for node in graph.nodes for t in node.outputs)




def _to_canonical_opset(model: onnx.ModelProto) -> gs.Graph:
    """The model as a graph at the canonical opset, by edgeconv's own adapters (converter/frontend/opsets)."""
    from .opsets import adapt_to_canonical

    return adapt_to_canonical(model, fold=lambda graph: _fold_to_fixpoint(graph)[0])


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        # in place: every caller passes a model it just exported and drops afterwards
        return light_model.infer_shapes(model, in_place=True, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # very large models: fall back to the uninferred graph
        return model


#: Attributes that later opsets added with a default that means "behave as before": the
#: version converter leaves them on the node when going down to opset 17.
_NEWER_DEFAULTS = {"noop_with_empty_axes": 0, "stash_type": 1}


def _drop_attributes_newer_than_opset(graph: gs.Graph) -> None:
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx", None):
            continue
        try:
            schema = onnx.defs.get_schema(node.op, CANONICAL_OPSET, "")
        except Exception:  # noqa: BLE001 - unknown op: the checker reports it
            continue
        for name in [a for a in node.attrs if a not in schema.attributes]:
            if name in _NEWER_DEFAULTS and node.attrs[name] == _NEWER_DEFAULTS[name]:
                del node.attrs[name]
            else:
                raise BadInput(f"node '{node.name}' ({node.op}) uses attribute '{name}', which opset "
                               f"{CANONICAL_OPSET} does not have")


def _check_acyclic(graph: gs.Graph) -> None:
    producers = {t.name: n for n in graph.nodes for t in n.outputs}
    indeg = {id(n): 0 for n in graph.nodes}
    users: dict[int, list[gs.Node]] = {id(n): [] for n in graph.nodes}
    for node in graph.nodes:
        for t in node.inputs:
            prod = producers.get(t.name)
            if prod is not None:
                indeg[id(node)] += 1
                users[id(prod)].append(node)
    ready = [n for n in graph.nodes if indeg[id(n)] == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for user in users[id(node)]:
            indeg[id(user)] -= 1
            if indeg[id(user)] == 0:
                ready.append(user)
    if seen != len(graph.nodes):
        stuck = next(n for n in graph.nodes if indeg[id(n)] > 0)
        raise BadInput(f"graph has a cycle through node '{stuck.name or stuck.op}' ({stuck.op})")


def _fix_input_shapes(graph: gs.Graph, shapes: dict[str, tuple[int, ...]]) -> None:
    by_name = {t.name: t for t in graph.inputs}
    for name, shape in shapes.items():
        if name not in by_name:
            raise BadInput(f"--input-shape names '{name}', but the model's inputs are: {', '.join(by_name)}")
        tensor = by_name[name]
        if tensor.shape is not None and len(tensor.shape) != len(shape):
            raise BadInput(f"--input-shape {name}: rank {len(shape)} given, the model's input has rank {len(tensor.shape)}")
        for given, dim in zip(shape, tensor.shape or shape):
            if isinstance(dim, (int, np.integer)) and dim > 0 and dim != given:
                raise BadInput(f"--input-shape {name}: {list(shape)} conflicts with the model's fixed shape {list(tensor.shape)}")
        tensor.shape = list(shape)
    # Everything downstream must be re-inferred from the new input shapes.
    for tensor in graph.tensors().values():
        if isinstance(tensor, gs.Variable) and tensor not in graph.inputs and tensor not in graph.outputs:
            tensor.shape = None


def _drop_needless_allowzero(graph: gs.Graph) -> None:
    """Reshape ``allowzero=1`` (the dynamo exporter writes it on every Reshape) means a 0 in the
    target shape is a real zero-size dim instead of "copy the input's"; with a constant target
    that has no 0 the two readings agree, and the edge converters know only the default."""
    for node in graph.nodes:
        if node.op != "Reshape" or not int(node.attrs.get("allowzero", 0)):
            continue
        target = node.inputs[1] if len(node.inputs) > 1 else None
        if isinstance(target, gs.Constant) and not np.any(np.asarray(target.values) == 0):
            del node.attrs["allowzero"]


def _short_prelu_slopes(graph: gs.Graph) -> None:
    """PRelu slopes without leading 1s: the dynamo exporter writes a per-channel slope as
    [1, C, 1, 1], the TorchScript one as [C, 1, 1] (the form the edge exporters read as per
    channel).  Broadcasting aligns from the right, so the values per element are the same."""
    for node in graph.nodes:
        slope = node.inputs[1] if node.op == "PRelu" and len(node.inputs) == 2 else None
        # (the dynamo exporter shares one constant between layers of equal slopes)
        if not isinstance(slope, gs.Constant) or any(r.op != "PRelu" or r.inputs[0] is slope for r in slope.outputs):
            continue
        value = np.asarray(slope.values)
        lead = 0
        while lead < value.ndim - 1 and value.shape[lead] == 1:
            lead += 1
        if lead:
            slope.values = value.reshape(value.shape[lead:])


def _drop_zero_adds(graph: gs.Graph) -> None:
    """``Add(x, zeros)`` that does not broadcast ``x`` becomes an Identity (removed next): torch's
    SDPA decomposition adds an all-zero [1, 1, L, L] bias when no mask is given (HF's ViT), which
    hides from the edge formats that the softmax reads only products of query and key.  x + 0 is
    x (a -0 becomes +0, equal in value)."""
    for node in graph.nodes:
        if node.op != "Add" or len(node.inputs) != 2:
            continue
        zeros = [i for i, t in enumerate(node.inputs) if isinstance(t, gs.Constant) and t.values.dtype.kind == "f"
                 and not np.asarray(t.values).any()]
        if len(zeros) != 1:
            continue
        x, out = node.inputs[1 - zeros[0]], node.outputs[0]
        shape = x.shape
        if shape is None or list(shape) != list(out.shape or []) or not all(isinstance(d, int) for d in shape) \
                or x.dtype != out.dtype:
            continue
        node.op, node.attrs = "Identity", {}
        node.inputs.pop(zeros[0])


def _remove_passthrough(graph: gs.Graph) -> None:
    """Drop Identity, inference-mode Dropout and one-input Concat (DenseNet's first block; TNN's
    Concat refuses a single input) by rewiring their consumers."""
    for node in list(graph.nodes):
        if node.op not in ("Identity", "Dropout") and not (node.op == "Concat" and len(node.inputs) == 1):
            continue
        if node.op == "Dropout" and len(node.inputs) > 2:
            training = node.inputs[2]
            if not isinstance(training, gs.Constant) or bool(np.asarray(training.values)):
                continue  # training-mode Dropout is not a pass-through
        src, dst = node.inputs[0], node.outputs[0]
        if any(len(out.outputs) or out in graph.outputs for out in node.outputs[1:]):
            continue  # the Dropout mask is used
        if dst in graph.outputs:
            if src in graph.inputs or isinstance(src, gs.Constant) or src in graph.outputs:
                continue  # keep: the output must stay a distinct tensor
            # The producer now writes the graph output directly.
            producer = src.inputs[0]
            producer.outputs[producer.outputs.index(src)] = dst
            for consumer in list(src.outputs):
                for i, t in enumerate(consumer.inputs):
                    if t is src:
                        consumer.inputs[i] = dst
        else:
            for consumer in list(dst.outputs):
                for i, t in enumerate(consumer.inputs):
                    if t is dst:
                        consumer.inputs[i] = src
        node.inputs.clear()
        node.outputs.clear()
    graph.cleanup(remove_unused_graph_inputs=False)


def _inline_constant_nodes(graph: gs.Graph, max_bytes: int | None = None) -> None:
    """Constant nodes (with a ``value``, of at most ``max_bytes``) become initializers."""
    for node in list(graph.nodes):
        if node.op != "Constant" or "value" not in node.attrs or node.outputs[0] in graph.outputs:
            continue
        out = node.outputs[0]
        value = node.attrs["value"]
        array = np.asarray(value.values if isinstance(value, gs.Constant) else value)
        if max_bytes is not None and array.nbytes > max_bytes:
            continue
        const = gs.Constant(out.name, array)
        for consumer in list(out.outputs):
            for i, t in enumerate(consumer.inputs):
                if t is out:
                    consumer.inputs[i] = const
        node.outputs.clear()
    graph.cleanup(remove_unused_graph_inputs=False)


def _rename(graph: gs.Graph) -> None:
    """Stable names: ``<op>_<k>`` per op type in topological order; outputs ``<node>`` or
    ``<node>_<j>``; initializers ``<first consumer>_<role>``.  Graph inputs/outputs keep theirs."""
    interface = {t.name for t in graph.inputs} | {t.name for t in graph.outputs}
    for t in list(graph.inputs) + list(graph.outputs):
        safe = t.name.translate(_UNSAFE)
        if safe != t.name and safe not in interface:
            interface.discard(t.name)
            t.name = safe
            interface.add(safe)
    counts: Counter[str] = Counter()
    used = set(interface)
    renamed: set[int] = set()

    def claim(base: str) -> str:
        return unique_name(base, used)

    for node in graph.nodes:
        base = f"{node.op.lower()}_{counts[node.op]}"
        counts[node.op] += 1
        node.name = claim(base)
        for j, out in enumerate(node.outputs):
            if out.name in interface or id(out) in renamed:
                continue
            out.name = claim(node.name if j == 0 else f"{node.name}_{j}")
            renamed.add(id(out))
    for node in graph.nodes:
        for i, t in enumerate(node.inputs):
            if isinstance(t, gs.Constant) and id(t) not in renamed and t.name not in interface:
                t.name = claim(f"{node.name}_in{i}")
                renamed.add(id(t))


def dynamic_inputs(model: onnx.ModelProto) -> list[str]:
    """One message per graph input dimension that is not a fixed positive integer."""
    messages = []
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                label = dim.dim_param or "?"
                example = "x".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else "1" for d in dims)
                messages.append(
                    f"input '{inp.name}' has a dynamic dimension '{label}' at axis {axis}; "
                    f"fix it with --input-shape {inp.name}={example}"
                )
    return messages


def seeded_inputs(model: onnx.ModelProto, seed: int = 0, int_high: int = 1) -> dict[str, np.ndarray] | None:
    """Inputs for a self-check: standard-normal floats, random bools, integers in
    ``[0, int_high)`` (zeros by default: indices and sizes stay valid).  None if a shape is not
    static."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
        if any(d is None for d in dims):
            return None
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, dims).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, int_high, dims).astype(dtype)
    return feeds


#: float32 tolerance of the normalization self-check.
NORMALIZE_ATOL = 1e-5


def check_equivalent(original: onnx.ModelProto, normalized: onnx.ModelProto,
                     input_shapes: dict[str, tuple[int, ...]] | None = None, seed: int = 0) -> float | None:
    """Run both models in onnxruntime on seeded inputs; raise if they differ beyond tolerance.

    Returns the max abs error, or None when the inputs are not static (nothing to run).
    """
    import onnxruntime as ort

    from ..errors import EdgeconvError

    feeds = seeded_inputs(normalized, seed, int_high=4)
    if feeds is None:
        return None
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3

    from ..infra.fsutil import private_temp_dir

    def session(m, tmp):
        if not is_large(m):
            return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        from ..ir.onnx_file import write_with_external_weights

        path = write_with_external_weights(m, Path(tmp) / f"model{len(os.listdir(tmp))}.onnx")
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run(m):
        try:
            with private_temp_dir("normalize") as tmp:  # marked: a killed run's is removed by the next
                sess = session(m, tmp)
        except Exception as err:
            raise BadInput(f"onnxruntime cannot run the model: {str(err).strip().splitlines()[0][:300]}") from None
        names = [o.name for o in sess.get_outputs()]
        from ..infra.limits import guarded_run  #  (time limit, Ctrl-C)

        # Normalization renames interface names the edge formats cannot carry ("[/x]" -> "__x_"):
        # graph inputs are matched by position.
        feeds_by_position = dict(zip(_interface(m, "input"), [feeds[k] for k in _interface(normalized, "input")]))
        wanted = {i.name for i in sess.get_inputs()}
        return dict(zip(names, guarded_run(sess, names, {k: v for k, v in feeds_by_position.items() if k in wanted})))

    ref, got = run(original), run(normalized)
    renamed = dict(zip(_interface(original, "output"), _interface(normalized, "output")))
    got = {before: got[after] for before, after in renamed.items() if after in got} if len(renamed) == len(got) else got
    worst = 0.0
    for name, value in ref.items():
        if name not in got:
            raise EdgeconvError(f"normalization lost output '{name}'")
        if value.size:
            worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - got[name].astype(np.float64)))))
    if worst > NORMALIZE_ATOL:
        raise EdgeconvError(f"normalization changed the outputs (max abs error {worst:.3g} > {NORMALIZE_ATOL})")
    return worst


def _interface(model: onnx.ModelProto, kind: str) -> list[str]:
    """The names of the graph inputs (initializers excluded) or outputs, in order."""
    if kind == "output":
        return [o.name for o in model.graph.output]
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]
