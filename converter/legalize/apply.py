"""Apply a plan: rewrite until every node is legal (or marked), then prove it with onnxruntime.

``legalize(model, framework, hw)`` rewrites each rejected node with the first rule of its
cheapest chain, infers shapes for what the rule emitted (only that), and repeats on the emitted
nodes until nothing changes (bounded: a node's descendants are rewritten at most
``MAX_REWRITES_PER_NODE`` times); the chains come from the same :class:`ChainSearch` that made the
plan.  Then the rewritten model runs once against the original on seeded inputs: with only
``exact`` rules the outputs must agree to float tolerance, with ``approximate`` ones within the
stated bounds; only if they do not are the rewrites replayed one by one to name the rule and node
that broke it (VerificationFailed).
``retrain`` rewrites are fitted by the default hook (layer-wise distillation against the original
layer) unless ``retrain_hook`` is given: ``retrain_hook(model) -> model`` on the rewritten ONNX.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.importers.onnx_importer import (get_onnx_tensor_dtype, get_onnx_tensor_shape,
                                                       get_onnx_tensor_type)

from ..errors import VerificationFailed
from ..ir.graph import NameAllocator, provenance_of, to_graph, to_model
from .neighbourhood import infer_nodes
from .partition import ACCEL, CPU, partition
from ..frontend.normalize import seeded_inputs  # noqa: F401  (re-exported: plan tests and custom capture use it)
from .plan import ChainSearch, Plan, plan_model
from .rewrites import APPROXIMATE, EXACT, REGISTRY, RETRAIN, apply_rule_to_graph
from .rewrites.base import infer

MAX_PASSES = 12
MAX_REWRITES_PER_NODE = 16
EXACT_ATOL, EXACT_RTOL = 1e-4, 1e-4
APPROX_AMPLIFICATION = 1e3


@dataclass
class LegalizeResult:
    model: onnx.ModelProto
    plan: Plan
    applied: list[tuple[str, str]] = field(default_factory=list)   # (rule, node)
    postprocess_nodes: set[str] = field(default_factory=set)
    custom_nodes: set[str] = field(default_factory=set)
    max_abs_error: float | None = None                              # vs the original, seeded inputs
    retrain_reports: list = field(default_factory=list)
    #: one line per node still rejected after rewriting that has no post-processing/custom remedy
    unresolved: list[str] = field(default_factory=list)

    #: nodes rewrites emitted that only the runtime's fallback unit runs (a rank lowering's
    #: Transpose on MACE's GPU)
    emitted_fallback: set[str] = field(default_factory=set)

    @property
    def fallback_nodes(self) -> set[str]:
        """Nodes left in the file for the runtime to run on its fallback unit."""
        return {e.node for e in self.plan.entries if e.remedy == "fallback"} | self.emitted_fallback

    @property
    def kinds(self) -> set[str]:
        return {REGISTRY[r].kind for r, _ in self.applied}


def legalize(model: onnx.ModelProto, framework: str, hw: str, matrix=None,
             retrain_hook: Callable | str | None = None, *, custom_ops=(), verify: bool = True,
             seed: int = 0) -> LegalizeResult:
    """Rewrite ``model`` for ``framework``/``hw`` following :func:`plan_model`.

    ``custom_ops``: op types the user wants as custom layers (never rewritten).
    ``retrain_hook``: ``"pkg.module:function"`` or a callable, given an ``nn.ModuleDict`` of
    the ``retrain`` replacement blocks (``.teachers``: the original layers) and returning it
    fine-tuned; None: the default layer-wise distillation.
    """
    from ..matrix import load_matrix

    matrix = matrix or load_matrix()
    hw = matrix.resolve_hw(framework, hw) if hasattr(matrix, "resolve_hw") else hw
    if isinstance(retrain_hook, str):
        from .rewrites.retrain import load_hook

        retrain_hook = load_hook(retrain_hook)  # a bad spec fails before any work
    # One import and one search for planning and rewriting: the plan only reads the graph, and
    # the rewrites reuse the plan's trials.
    graph = to_graph(model)
    search = ChainSearch(matrix, framework, hw)
    plan = plan_model(model, framework, hw, matrix, custom_ops=custom_ops, search=search, graph=graph)
    keep = {e.node for e in plan.entries if e.remedy in ("postprocess", "custom", "fallback")}
    keep |= _downstream(graph, {e.node for e in plan.entries if e.remedy == "postprocess"})
    if all(e.remedy == "supported" for e in plan.entries):
        # The matrix takes every node as it is: the legalized model *is* the input (no rewrite
        # pass, no second export + shape inference, which would give the same model back).
        return LegalizeResult(model, plan)
    current, applied, graph = _rewrite_to_fixpoint(model, matrix, framework, hw, search, keep, graph=graph)
    reports = []
    if any(REGISTRY[r].kind == RETRAIN for r, _ in applied):
        current, reports = _fit_retrain_rewrites(model, current, applied, retrain_hook)
        graph = to_graph(current)
    # a node planned as a custom layer is none when a rewrite of its consumers left it unused
    # (an IsNaN whose guard was dropped): cleanup removed it from the model
    present = {n.name for n in current.graph.node}
    for entry in plan.entries:
        if entry.remedy == "custom" and entry.node not in present:
            entry.remedy, entry.reason = "rewrite", f"unused once its consumers were rewritten: removed ({entry.reason})"
    result = LegalizeResult(current, plan, applied,
                            {e.node for e in plan.entries if e.remedy == "postprocess"},
                            {e.node for e in plan.entries if e.remedy == "custom"}, None, reports)
    result.unresolved, result.emitted_fallback = _unresolved(graph, matrix, framework, hw, keep, search)
    if result.emitted_fallback:
        plan.partitions = _partitions_after(graph, plan, result.fallback_nodes, hw, search.fallback_unit)
    if verify and applied:
        result.max_abs_error = _verify(model, current, applied, seed, matrix, framework, hw, search, keep)
    return result


def _downstream(graph, names: set[str]) -> set[str]:
    """Every node fed, directly or not, by the nodes ``names``.  Downstream of a node moved to
    post-processing, everything moves with the trailing cut; rewriting those nodes for the
    accelerator first could turn a post-processable op into one that is not (a Slice into a
    shift convolution on MACE's GPU) and break the cut the plan found."""
    if not names:
        return set()
    consumers: dict[str, list] = {}
    for node in graph.nodes:
        for t in node.inputs:
            consumers.setdefault(t.name, []).append(node)
    seen: set[str] = set()
    stack = [n for n in graph.nodes if n.name in names]
    while stack:
        for t in stack.pop().outputs:
            for c in consumers.get(t.name, []):
                if c.name not in seen and c.name not in names:
                    seen.add(c.name)
                    stack.append(c)
    return seen


def _rewrite_to_fixpoint(model, matrix, framework, hw, search, keep, limit=None, graph=None):
    """Rewrite rejected nodes pass by pass until a pass changes nothing; returns the model, the
    rewrites applied, and the graph the model was exported from.

    Only what a rewrite emits gets new shapes (:func:`infer_nodes`, right after the rewrite);
    between passes the graph is cleaned and sorted in place, as an export would.  One
    whole-model shape inference runs at the end (and after the first pass when the input model
    came with tensors of unknown shape, which later passes' checks need).  ``graph``: the
    model already imported, edited in place.
    """
    graph = to_graph(model) if graph is None else graph
    unshaped = _has_unshaped_tensors(graph)
    clean = False  # cleaned and sorted since the last edit (as an export would)
    shapes_seen: dict = {}
    applied: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    for pass_no in range(MAX_PASSES):
        changed = False
        names = NameAllocator(graph)
        prov = provenance_of(graph)
        for node in list(graph.nodes):
            if node.name in keep or not node.outputs or not node.inputs and node.op != "Constant":
                continue
            if matrix.check_node(node, framework, hw).supported:
                continue
            origin = prov.node_origin.get(node.name, {}).get("from", node.name)
            if counts.get(origin, 0) >= MAX_REWRITES_PER_NODE:
                continue
            found = search.chain_or_fallback(node, graph)
            if found is None:
                continue
            rule_obj = REGISTRY[found[1][0]]
            if any(n.name in keep for n in rule_obj.touches(node, graph) if n is not node):
                continue  # it would rewrite a node the plan moved out of the file (plan.py says why)
            infer_nodes(apply_rule_to_graph(graph, rule_obj, node, names), graph, shapes_seen)
            applied.append((rule_obj.name, node.name))
            counts[origin] = counts.get(origin, 0) + 1
            changed = True
            if limit is not None and len(applied) >= limit:
                return infer(to_model(graph)), applied, graph
        if not changed:
            break
        if pass_no == 0 and unshaped:
            graph = to_graph(infer(to_model(graph)))
        else:
            graph.cleanup(remove_unused_graph_inputs=False).toposort()
        clean = True
    return _export_inferred(graph, clean), applied, graph


def _has_unshaped_tensors(graph: gs.Graph) -> bool:
    return any(isinstance(t, gs.Variable) and t.name and (t.shape is None or t.dtype is None)
               for t in graph.tensors().values())


def _export_inferred(graph: gs.Graph, clean: bool = False) -> onnx.ModelProto:
    """``to_model(to_graph(infer(to_model(graph))))`` with one export and no import: the
    inferred types are written back onto ``graph``'s tensors as the importer would read them,
    and the model's value infos rebuilt from them as the exporter would write them.
    ``clean``: the graph is already cleaned and sorted."""
    model = infer(to_model(graph, cleanup=not clean))
    infos = {vi.name: vi for vi in (*model.graph.input, *model.graph.value_info, *model.graph.output)}
    tensors = graph.tensors()
    for name, t in tensors.items():
        if not isinstance(t, gs.Variable) or not name:
            continue
        vi = infos.get(name)
        if vi is None or vi.type.ByteSize() == 0:
            t.dtype, t.shape = None, None
        else:
            t.dtype, t.shape, t.type = (get_onnx_tensor_dtype(vi), get_onnx_tensor_shape(vi),
                                        get_onnx_tensor_type(vi))
    export = OnnxExporter.export_value_info_proto
    ends = {t.name for t in (*graph.inputs, *graph.outputs)}
    del model.graph.input[:], model.graph.output[:], model.graph.value_info[:]
    model.graph.input.extend(export(t, False) for t in graph.inputs)
    model.graph.output.extend(export(t, False) for t in graph.outputs)
    model.graph.value_info.extend(export(t, False) for name, t in tensors.items()
                                  if name not in ends and isinstance(t, gs.Variable)
                                  and (t.dtype is not None or t.shape is not None))
    return model


def _fit_retrain_rewrites(original: onnx.ModelProto, current: onnx.ModelProto, applied, hook=None):
    """Fit each Resize+Conv that replaced a ConvTranspose: by default layer-wise distillation
    against the original layer; with ``hook``, the user's function fine-tunes the blocks."""
    from .rewrites.base import const_input, present
    from .rewrites.convtranspose import geometry
    from .rewrites import retrain

    by_name = {n.name: n for n in to_graph(original).nodes}
    graph = to_graph(current)
    prov = provenance_of(graph)
    targets = {}
    for rule_name, node_name in applied:
        if REGISTRY[rule_name].kind != RETRAIN or node_name not in by_name:
            continue
        ct = by_name[node_name]
        conv = next(n for n in graph.nodes if n.op == "Conv"
                    and prov.node_origin.get(n.name, {}).get("from") == node_name
                    and prov.node_origin.get(n.name, {}).get("by") == rule_name)
        w = const_input(ct, 1)
        b = const_input(ct, 2) if present(ct, 2) else None
        targets[node_name] = (conv, geometry(ct), w, b)
    reports, fitted = [], {}
    if hook is None:
        for node_name, (conv, geo, w, b) in targets.items():
            fw, fb, report = retrain.fit_onnx_resize_conv(w, b, geo, np.asarray(conv.inputs[1].values))
            report.layer = node_name
            reports.append(report)
            fitted[node_name] = (fw, fb)
    else:
        pairs = {}
        for node_name, (conv, geo, w, b) in targets.items():
            teacher, student = retrain.onnx_resize_conv_pair(w, b, geo, np.asarray(conv.inputs[1].values))
            pairs[node_name] = (teacher, student, w, b)
        fitted = retrain.run_user_hook_on_blocks(hook, pairs)
    for node_name, (fw, fb) in fitted.items():
        conv = targets[node_name][0]
        conv.inputs[1] = gs.Constant(conv.inputs[1].name + "_fitted", fw)
        if fb is not None:
            conv.inputs[2] = gs.Constant(conv.inputs[2].name + "_fitted", fb)
    return to_model(graph), reports


def _unresolved(graph, matrix, framework, hw, keep, search) -> tuple[list[str], set[str]]:
    """Nodes the hardware still rejects after rewriting, apart from what the plan moved or kept:
    (one line per node nothing resolves, the nodes the runtime's fallback unit runs)."""
    prov = provenance_of(graph)
    out, fallback = [], set()
    for node in graph.nodes:
        origin = prov.node_origin.get(node.name, {}).get("from", node.name)
        if node.name in keep or origin in keep:
            continue
        verdict = matrix.check_node(node, framework, hw)
        if verdict.supported:
            continue
        if search.falls_back(node):  # a rewrite emitted it; the runtime runs it on its fallback unit
            fallback.add(node.name)
        else:
            out.append(f"{node.name} ({node.op}): {verdict.reason}")
    return out, fallback


def _partitions_after(graph, plan, fallback_nodes: set[str], hw: str, fallback_unit: str):
    """The partitions of the legalized graph: the plan's were counted before rewriting, which
    emitted nodes that only the fallback unit runs."""
    post = {e.node for e in plan.entries if e.remedy == "postprocess"}
    units = {n.name: CPU if n.name in fallback_nodes else ACCEL for n in graph.nodes if n.name not in post}
    return partition(graph, units, hw, fallback_unit)


def run_onnx(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    from ..ir.weights import onnxruntime_source

    source, _held = onnxruntime_source(model, opts)  # weight-store arrays as external initializers
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    from ..infra.limits import guarded_run  #  (--timeout and Ctrl-C stop a model that never ends)

    return dict(zip(names, guarded_run(sess, names, feeds)))


def output_error(ref: dict, got: dict) -> tuple[float, float]:
    """(max abs error, allowed error) over all outputs with the exact-rule tolerance."""
    err, allowed = 0.0, np.inf
    for name, r in ref.items():
        g = got[name]
        if r.shape != g.shape:
            return np.inf, 0.0
        diff = np.abs(r.astype(np.float64) - g.astype(np.float64))
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        err = max(err, float(np.nanmax(diff)) if diff.size else 0.0)
        allowed = min(allowed, EXACT_ATOL + EXACT_RTOL * scale)
    return err, allowed


def _verify(original, current, applied, seed, matrix, framework, hw, search, keep) -> float | None:
    feeds = seeded_inputs(original, seed)
    if feeds is None:
        return None
    ref = run_onnx(original, feeds)
    err, allowed = output_error(ref, run_onnx(current, feeds))
    kinds = {REGISTRY[r].kind for r, _ in applied}
    if RETRAIN in kinds:
        return err  # a changed architecture is reported, not failed (see retrain_reports)
    if APPROXIMATE in kinds:
        # A rule's bound is on its own output; downstream layers may amplify it (≤ 1000× here).
        allowed += APPROX_AMPLIFICATION * sum(REGISTRY[r].error_bound for r, _ in applied if REGISTRY[r].kind == APPROXIMATE)
    if err <= allowed:
        return err
    # Replay one rewrite at a time to name the first one that changed the outputs.
    for k in range(1, len(applied) + 1):
        step, steps, _ = _rewrite_to_fixpoint(original, matrix, framework, hw, search, keep, limit=k)
        e, a = output_error(ref, run_onnx(step, feeds))
        rule_name, node_name = steps[-1]
        if REGISTRY[rule_name].kind == EXACT and e > a:
            raise VerificationFailed(
                f"exact rule {rule_name} changed the outputs of node {node_name}: max abs error {e:.3g} > {a:.3g}")
    raise VerificationFailed(f"rewritten model differs from the original: max abs error {err:.3g} > {allowed:.3g}")
