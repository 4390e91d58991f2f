"""The planner: a remedy for every node the matrix rejects, and the reason for it.

For an unsupported node, the planner searches the cheapest chain of rules whose emitted ops the
matrix accepts (an emitted op that is itself unsupported is expanded by the rules for that op,
never revisiting an op already on the chain: the search always ends).  The chain's first rule is
checked against the real node (its conditions); later links only against the op, so the
legalizer re-checks every node it creates and rewrites again until a fixpoint.  A chain with a
``retrain`` rule gives remedy ``retrain``; no chain: ``postprocess`` when the node can move into
generated post-processing code (:func:`converter.postproc.cut.find_cut`), else ``fallback`` when
the hardware's runtime runs what it cannot on another unit (matrix ``fallback:``; TFLite delegates,
MACE ``cpu+gpu``, CoreML compute units) and that unit runs the node — the plan then reports the
partitions (:mod:`converter.legalize.partition`) — else ``custom``, except for an op that only moves data
(:data:`DATA_MOVEMENT`), which can always be re-expressed and so is never a custom layer: without
a chain it is ``unsupported``, with the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import onnx

from ..errors import BadInput
from ..ir.graph import is_constant, to_graph
from .neighbourhood import Unkeyable, neighbourhood, settle
from .partition import ACCEL, CPU, Partitions, absorb_small_islands, compiler_may_leave_on_cpu, partition
from .rewrites import REGISTRY, RETRAIN, apply_rule_to_graph, rules_for
from .rewrites.base import CONTEXT_RADIUS

REMEDIES = ("supported", "rewrite", "retrain", "fallback", "postprocess", "custom", "unsupported")
MAX_CHAIN_DEPTH = 4
#: Ops that compute nothing, only move or select data: a custom layer is never their remedy
#: (Gather and Slice when their indices are constants: see :func:`moves_data`).
DATA_MOVEMENT = frozenset({
    "Reshape", "Transpose", "Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Flatten", "Expand",
    "Tile", "Split", "DepthToSpace", "SpaceToDepth", "Identity",
})


def moves_data(node) -> bool:
    """``node`` only moves data chosen at export time: it can always be re-expressed."""
    if node.op not in DATA_MOVEMENT:
        return False
    if node.op == "Gather":
        return is_constant(node.inputs[1])
    if node.op == "Slice":
        return all(is_constant(t) for t in node.inputs[1:] if t.name)
    return True


@dataclass
class PlanEntry:
    node: str
    op: str
    verdict: str          # the matrix status: supported | unverified | unsupported
    remedy: str           # one of REMEDIES
    rules: list[str]      # the chosen chain, first rule applied to this node
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Plan:
    framework: str
    hw: str
    entries: list[PlanEntry] = field(default_factory=list)
    #: how the runtime splits the model when nodes fall back to another unit (None: no fallback)
    partitions: Partitions | None = None
    #: supported nodes the compiler may still leave on the CPU (:func:`.partition.compiler_may_leave_on_cpu`)
    may_stay_on_cpu: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every node runs in the file, as it is, rewritten, or on the runtime's fallback unit
        (no post-processing, no custom layer)."""
        return all(e.remedy in ("supported", "rewrite", "retrain", "fallback") for e in self.entries)

    def by_remedy(self, remedy: str) -> list[PlanEntry]:
        return [e for e in self.entries if e.remedy == remedy]

    def to_json(self) -> dict:
        counts = {r: len(self.by_remedy(r)) for r in REMEDIES}
        return {"framework": self.framework, "hw": self.hw, "ok": self.ok, "counts": counts,
                "partitions": self.partitions.to_json() if self.partitions else None,
                "may_stay_on_cpu": self.may_stay_on_cpu,
                "entries": [e.to_dict() for e in self.entries]}


#: What a chain pays for each node it emits that only the fallback unit runs: more than any
#: chain of rules (retraining costs 100), so a chain on the accelerator always wins.
FALLBACK_COST = 1000


class ChainSearch:
    """Cheapest rule chains for one framework × hardware.

    Op-level chains are memoized per op; a trial of a rule on a real node is memoized per
    (rule, neighbourhood signature), so nodes in alike surroundings (18 GELU blocks of one
    width) cost one trial.  ``trials`` counts the trials really run.
    """

    def __init__(self, matrix, framework: str, hw: str):
        self.matrix, self.framework, self.hw = matrix, framework, hw
        self._op_cache: dict[tuple[str, frozenset], tuple[int, list[str]] | None] = {}
        self._trials: dict[tuple, tuple[int, list[str]] | None] = {}
        self.trials = 0
        #: The unit the runtime hands nodes the accelerator cannot run (None: no fallback).
        self.fallback_unit = matrix.fallback(framework, hw).to if hasattr(matrix, "fallback") else None

    def falls_back(self, node) -> bool:
        """The accelerator rejects ``node`` but the runtime's fallback unit runs it."""
        return self.fallback_unit is not None and \
            self.matrix.check_node(node, self.framework, self.fallback_unit).supported

    def chain_or_fallback(self, node, graph) -> tuple[int, list[str]] | None:
        """:meth:`for_node`, except None when the chain would only leave nodes to the fallback unit
        that the node itself could go to: rewriting then buys nothing."""
        found = self.for_node(node, graph)
        if found is not None and found[0] >= FALLBACK_COST and self.falls_back(node):
            return None
        return found

    def supports(self, op: str) -> bool:
        return self.matrix.supports_op(self.framework, self.hw, op)

    def for_node(self, node, graph, depth: int = 0, fallback: bool | None = None) -> tuple[int, list[str]] | None:
        """(cost, chain) for a real node.

        Candidates are ranked by the op-level search; each is then tried on a copy of the node's
        neighbourhood (:mod:`converter.legalize.neighbourhood`), shapes inferred for what it emits, and
        every node it emits checked by the matrix with its real attributes and shapes (a 6-D
        Reshape fails a rank-4 delegate even though Reshape is supported): an emitted node that
        is rejected needs its own chain, else the next candidate is tried.  Only when no chain
        keeps everything on the accelerator, a second round (``fallback``; the chain a rule
        nests in keeps its round) lets emitted nodes the fallback unit runs stay rejected, at
        :data:`FALLBACK_COST` each.
        """
        usable = [r for r in rules_for(node.op) if r.matches(node, graph)]
        if not usable:
            return None
        around = {}
        rounds = (False, True) if fallback is None and self.fallback_unit else (bool(fallback),)
        for allow_fallback in rounds:
            ranked = [found for r in usable
                      if (found := self._emitted(r, frozenset({node.op}), 1, allow_fallback)) is not None]
            for cost, chain in sorted(ranked, key=lambda c: (c[0], c[1])):
                r = REGISTRY[chain[0]]
                # A rule that rewrites more than its node reads all of it: the copy must hold it
                # all (a rank lowering's component can reach further than CONTEXT_RADIUS links).
                radius = CONTEXT_RADIUS + (len(r.touches(node, graph)) - 1 if r.scope is not None else 0)
                if radius not in around:
                    around[radius] = _keyed(neighbourhood(graph, node, radius))
                tried = self._trial(*around[radius], r, depth, allow_fallback)
                if tried is not None:
                    return cost + tried[0], [chain[0]] + tried[1]
        return None

    def _trial(self, around, signature, r, depth, allow_fallback: bool = False):
        key = (r.name, signature, allow_fallback)
        if key in self._trials:
            return self._trials[key]
        self._trials[key] = None  # guards against re-entry while this trial runs
        self.trials += 1
        small, twin = around.copy()
        if r.why_not(twin, small) is not None:  # it needs more than the copy holds: not judged here
            return None
        emitted = settle(small, apply_rule_to_graph(small, r, twin))
        extra_cost, extra_chain = 0, []
        for new in emitted:
            if self.matrix.check_node(new, self.framework, self.hw).supported:
                continue
            sub = self.for_node(new, small, depth + 1, allow_fallback) if depth < MAX_CHAIN_DEPTH else None
            if sub is None and allow_fallback and self.falls_back(new):  # a lowering's Transpose on MACE's GPU
                extra_cost += FALLBACK_COST
                continue
            if sub is None:
                return None
            extra_cost += sub[0]
            extra_chain += [n for n in sub[1] if n not in extra_chain]
        self._trials[key] = (extra_cost, extra_chain)
        return self._trials[key]

    def why_no_rule(self, node, graph) -> str:
        rules = rules_for(node.op)
        usable = [r for r in rules if r.matches(node, graph)]
        if usable:
            missing = []
            for r in usable:
                lacking = [op for op in dict.fromkeys(r.emits) if not self.supports(op)]
                missing.append(f"{r.name} needs {', '.join(lacking)}" if lacking
                               else f"{r.name} emits nodes {self.framework}/{self.hw} rejects")
            return "no rule chain is legal here (" + "; ".join(missing) + ")"
        reasons = [f"{r.name}: {r.why_not(node, graph)}" for r in rules]
        return "no rewrite rule for " + node.op + (f" ({'; '.join(reasons)})" if reasons else "")

    def _emitted(self, r, visiting: frozenset, depth: int, allow_fallback: bool = False) -> tuple[int, list[str]] | None:
        cost, chain = r.cost, [r.name]
        for op in dict.fromkeys(r.emits):
            if self.supports(op):
                continue
            sub = self.for_op(op, visiting, depth)
            if sub is None and allow_fallback and self.matrix.supports_op(self.framework, self.fallback_unit, op):
                cost += FALLBACK_COST
                continue
            if sub is None:
                return None
            cost += sub[0]
            chain += sub[1]
        return cost, chain

    def for_op(self, op: str, visiting: frozenset = frozenset(), depth: int = 0):
        """(cost, chain) that removes ``op`` assuming its rules' conditions hold; None if none."""
        if op in visiting or depth >= MAX_CHAIN_DEPTH:
            return None
        key = (op, visiting)
        if key not in self._op_cache:
            best = None
            for r in rules_for(op):
                found = self._emitted(r, visiting | {op}, depth + 1)
                if found is not None and (best is None or found[0] < best[0]):
                    best = found
            self._op_cache[key] = best
        return self._op_cache[key]


def _kind_of(chain: list[str]) -> str:
    return "retrain" if any(REGISTRY[n].kind == RETRAIN for n in chain) else "rewrite"


def _describe(chain: list[str]) -> str:
    parts = []
    for name in chain:
        r = REGISTRY[name]
        tag = "" if r.kind == "exact" else (f" [approximate, ≤{r.error_bound:g}]" if r.kind == "approximate"
                                            else " [retrain: weights must be fitted]")
        parts.append(f"{name}{tag}: {r.summary}")
    return "; then ".join(parts)


def _keyed(around):
    """(neighbourhood, its signature); an unkeyable one gets a key equal to no other (no reuse)."""
    try:
        return around, around.signature()
    except Unkeyable:
        return around, object()


def plan_model(model: onnx.ModelProto, framework: str, hw: str, matrix=None, *, custom_ops=(),
               search: ChainSearch | None = None, graph=None) -> Plan:
    """A :class:`Plan` with one entry per node, in graph order.

    ``custom_ops``: op types the user implements as custom layers: never rewritten or moved.
    ``search``: a :class:`ChainSearch` for the same target to reuse (the legalizer passes its
    own, so the trials run here are not run again); ``graph``: ``to_graph(model)`` when the
    caller has it already (only read here).
    """
    from ..matrix import load_matrix

    matrix = matrix or load_matrix()
    hw = matrix.resolve_hw(framework, hw) if hasattr(matrix, "resolve_hw") else hw
    moving = sorted(set(custom_ops) & (DATA_MOVEMENT - {"Gather", "Slice"}))
    if moving:
        raise BadInput(f"--custom-op {moving[0]}: {moving[0]} only moves data; it is rewritten, never a custom layer")
    graph = to_graph(model) if graph is None else graph
    search = search or ChainSearch(matrix, framework, hw)
    plan = Plan(framework, hw)
    stuck = []
    for node in graph.nodes:
        verdict = matrix.check_node(node, framework, hw)
        if node.op in custom_ops:
            plan.entries.append(PlanEntry(node.name, node.op, verdict.status, "custom", [],
                                          f"{verdict.reason}; --custom-op {node.op}: custom layer"))
            continue
        if verdict.supported:
            plan.entries.append(PlanEntry(node.name, node.op, verdict.status, "supported", [], verdict.reason))
            continue
        found = search.for_node(node, graph, fallback=False)
        if found is not None:
            plan.entries.append(PlanEntry(node.name, node.op, verdict.status, _kind_of(found[1]), found[1],
                                          f"{verdict.reason}; {_describe(found[1])}"))
            continue
        entry = PlanEntry(node.name, node.op, verdict.status, "unsupported" if moves_data(node) else "custom",
                          [], f"{verdict.reason}; {search.why_no_rule(node, graph)}")
        plan.entries.append(entry)
        stuck.append(entry)
    _assign_postprocess(graph, stuck)
    stuck = [e for e in stuck if e.remedy != "postprocess"]
    stuck += _follow_into_postprocess(graph, plan)
    stuck = _rewrite_leaving_to_fallback(graph, stuck, search)
    _assign_fallback(graph, plan, stuck, matrix, framework, hw)
    _rewrite_with_their_component(graph, plan)
    for e in stuck:
        if e.remedy != "fallback":
            e.reason += ": " + _last_resort(e)
    if hasattr(matrix, "may_stay_on_cpu"):
        supported = {e.node for e in plan.entries if e.remedy == "supported"}
        plan.may_stay_on_cpu = compiler_may_leave_on_cpu(graph, supported, matrix, framework, hw)
    return plan


def _assign_postprocess(graph, stuck: list[PlanEntry]) -> None:
    """Move stuck nodes to post-processing where the trailing cut allows, greedily in graph order."""
    if not stuck:
        return
    try:
        from ..postproc.cut import find_cut, trailing_region
    except ImportError:  # the post-processing split is optional; then everything is custom
        for e in stuck:
            e.reason += "; post-processing split unavailable"
        return
    region = trailing_region(graph)  # one pass over the graph for all the cuts below
    moved: set[str] = set()
    for e in stuck:
        cut = find_cut(graph, moved | {e.node}, region)
        if cut.ok:
            moved |= {e.node}
            e.remedy = "postprocess"
            e.reason += "; trailing: runs in generated post-processing"
        else:
            e.reason += f"; not trailing ({cut.reason})"


def _follow_into_postprocess(graph, plan: Plan) -> list[PlanEntry]:
    """A rewrite whose rule rewrites more than its node (a rank lowering rewrites the whole
    component of rank-5 tensors) may not rewrite nodes moved to post-processing.  Such a node
    moves to post-processing with them when the cut stays trailing; else it is stuck (returned)."""
    post = {e.node for e in plan.entries if e.remedy == "postprocess"}
    scoped = [e for e in plan.entries if e.rules and REGISTRY[e.rules[0]].scope is not None]
    if not post or not scoped:
        return []
    from ..postproc.cut import find_cut, trailing_region

    nodes = {n.name: n for n in graph.nodes}
    region, stuck = trailing_region(graph), []
    for e in scoped:
        rule_obj = REGISTRY[e.rules[0]]
        touched = sorted(n.name for n in rule_obj.touches(nodes[e.node], graph) if n.name in post)
        if not touched:
            continue
        why = f"; {rule_obj.name} would also rewrite {touched[0]}, which runs in post-processing"
        e.rules, cut = [], find_cut(graph, post | {e.node}, region)
        if cut.ok:
            post.add(e.node)
            e.remedy = "postprocess"
            e.reason += why + ": moves there with it"
        else:
            e.remedy = "unsupported" if moves_data(nodes[e.node]) else "custom"
            e.reason += why + f", and it cannot follow ({cut.reason})"
            stuck.append(e)
    return stuck


def _rewrite_leaving_to_fallback(graph, stuck: list[PlanEntry], search: ChainSearch) -> list[PlanEntry]:
    """A stuck node that post-processing cannot take may still be rewritten when what the rule
    emits and the accelerator rejects runs on the fallback unit (a rank-5 Transpose lowered to a
    rank-4 one on MACE's GPU), unless the node could simply go there itself.  Returns the rest."""
    if search.fallback_unit is None:
        return stuck
    nodes = {n.name: n for n in graph.nodes}
    rest = []
    for e in stuck:
        found = search.chain_or_fallback(nodes[e.node], graph)
        if found is None:
            rest.append(e)
            continue
        e.remedy, e.rules = _kind_of(found[1]), found[1]
        e.reason += (f"; but {_describe(found[1])}, and what it emits that {search.hw} rejects runs on "
                     f"{search.fallback_unit}, the runtime's fallback")
    return rest


def _rewrite_with_their_component(graph, plan: Plan) -> None:
    """A rule that rewrites a whole component (a rank lowering) rewrites the nodes of it the plan
    left to the fallback unit too (what it emits that the accelerator rejects falls back): left
    out, they would keep the rule from applying at all."""
    left = {e.node: e for e in plan.entries if e.remedy == "fallback"}
    if not left:
        return
    nodes = {n.name: n for n in graph.nodes}
    for e in plan.entries:
        if e.remedy != "rewrite" or not e.rules or REGISTRY[e.rules[0]].scope is None:
            continue
        rule_obj = REGISTRY[e.rules[0]]
        for n in rule_obj.touches(nodes[e.node], graph):
            other = left.pop(n.name, None)
            if other is not None:
                other.remedy, other.rules = "rewrite", [rule_obj.name]
                other.reason += f"; rewritten with {e.node} ({rule_obj.name} rewrites their whole component)"


def _assign_fallback(graph, plan: Plan, stuck: list[PlanEntry], matrix, framework: str, hw: str) -> None:
    """Leave stuck nodes the fallback unit runs to it, absorb tiny accelerator islands between
    them, and record the partitions the runtime will make."""
    if not stuck or not hasattr(matrix, "fallback"):
        return
    fb = matrix.fallback(framework, hw)
    if fb.to is None:
        for e in stuck:
            e.reason += f"; no fallback ({fb.reason})"
        return
    nodes = {n.name: n for n in graph.nodes}
    for e in stuck:
        verdict = matrix.check_node(nodes[e.node], framework, fb.to)
        if verdict.supported:
            e.remedy = "fallback"
            e.reason += f"; runs on {fb.to}, the runtime's fallback ({fb.source})"
        else:
            e.reason += f"; {fb.to} cannot run it either ({verdict.reason})"
    if not any(e.remedy == "fallback" for e in stuck):
        return
    units = {e.node: CPU if e.remedy == "fallback" else ACCEL for e in plan.entries if e.remedy != "postprocess"}
    moved = absorb_small_islands(graph, units, lambda n: matrix.check_node(n, framework, fb.to).supported)
    for e in plan.entries:
        if e.node in moved:
            e.remedy = "fallback"
            e.reason += f"; runs on {fb.to} with its neighbours (fewer partitions)"
    plan.partitions = partition(graph, units, hw, fb.to)


def _last_resort(e: PlanEntry) -> str:
    """A custom layer for a compute op; data movement stays ``unsupported`` (it can always be
    re-expressed, so a missing rewrite is a gap to report, not a kernel to write)."""
    if e.remedy == "unsupported":
        return "data movement is never a custom layer: unsupported"
    return "custom layer scaffold"
