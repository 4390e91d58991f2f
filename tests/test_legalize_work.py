"""Legalize does work proportional to what changes, not to (graph size x rewrites).

Counted, not timed: whole-model ONNX shape inferences, rule trials, neighbourhood inferences,
fixpoint runs and onnxruntime sessions while legalizing a chain of N alike Erf nodes on
tnn/arm (each rewritten by ``erf_polynomial``).  Trials are memoized by neighbourhood, so their
count must not grow with N; one whole-model inference at the end; one onnxruntime comparison.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter.legalize.apply as legalize_mod
import converter.legalize.plan as plan_mod
from converter.errors import VerificationFailed
from converter.ir.graph import Provenance, to_graph
from converter.matrix import load_matrix
from converter.legalize.neighbourhood import infer_nodes, neighbourhood
from converter.legalize.rewrites import REGISTRY, apply_rule_to_graph
from converter.legalize.rewrites.base import EXACT


def _erf_chain(n: int) -> onnx.ModelProto:
    """x -> Erf -> Mul(0.5) -> Erf -> Mul(0.5) -> ... -> y  (n Erf nodes)."""
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Erf", [prev], [f"e{i}"], name=f"erf_{i}"))
        out = "y" if i == n - 1 else f"m{i}"
        nodes.append(helper.make_node("Mul", [f"e{i}", "half"], [out], name=f"mul_{i}"))
        prev = out
    graph = helper.make_graph(nodes, "erf_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


class Counts:
    def __init__(self, monkeypatch):
        self.inferred_sizes: list[int] = []
        self.fixpoints = self.sessions = 0
        self.searches: list = []
        counts = self
        infer_shapes = onnx.shape_inference.infer_shapes

        def counting_infer(model, *a, **k):
            counts.inferred_sizes.append(len(model.graph.node))
            return infer_shapes(model, *a, **k)

        fixpoint, run_onnx = legalize_mod._rewrite_to_fixpoint, legalize_mod.run_onnx

        def counting_fixpoint(*a, **k):
            counts.fixpoints += 1
            return fixpoint(*a, **k)

        def counting_run(*a, **k):
            counts.sessions += 1
            return run_onnx(*a, **k)

        class CountingSearch(plan_mod.ChainSearch):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                counts.searches.append(self)

        monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting_infer)
        monkeypatch.setattr(legalize_mod, "_rewrite_to_fixpoint", counting_fixpoint)
        monkeypatch.setattr(legalize_mod, "run_onnx", counting_run)
        monkeypatch.setattr(legalize_mod, "ChainSearch", CountingSearch)
        monkeypatch.setattr(plan_mod, "ChainSearch", CountingSearch)


def _legalize_counted(n, monkeypatch):
    model, matrix = _erf_chain(n), load_matrix()
    with monkeypatch.context() as m:
        counts = Counts(m)
        result = legalize_mod.legalize(model, "tnn", "arm", matrix)
    final_size = len(result.model.graph.node)
    whole = [s for s in counts.inferred_sizes if s >= final_size]
    small = [s for s in counts.inferred_sizes if s < final_size]
    return result, counts, whole, small


def test_work_does_not_grow_with_the_number_of_alike_rewrites(monkeypatch):
    runs = {n: _legalize_counted(n, monkeypatch) for n in (6, 24)}
    for n, (result, counts, whole, _small) in runs.items():
        assert [r for r, _ in result.applied] == ["erf_polynomial"] * n
        assert result.unresolved == []
        assert result.max_abs_error is not None and result.max_abs_error < 1e-5
        assert len(whole) == 1, f"N={n}: {len(whole)} whole-model shape inferences"
        assert len(counts.searches) == 1, "plan_model and legalize must share one ChainSearch"
        assert counts.fixpoints == 1 and counts.sessions == 2  # no replay when the check passes
    (_, c6, _, small6), (_, c24, _, small24) = runs[6], runs[24]
    # 4x the rewrites, the same number of trials and of small inferences (one per trial, one
    # per distinct emitted group).  Trials: 5 neighbourhoods while planning (2 at each end of
    # the chain, 1 in the middle), 4 more while rewriting (a node whose predecessor was just
    # rewritten has new surroundings: at the start, the middle, the end).
    assert c6.searches[0].trials == c24.searches[0].trials <= 9
    assert len(small6) == len(small24) <= c24.searches[0].trials + 1
    assert max(small24) < 60  # neighbourhoods, not the graph


def test_emitted_nodes_are_shaped_and_provenance_kept(monkeypatch):
    result, *_ = _legalize_counted(3, monkeypatch)
    graph = to_graph(result.model)
    prov = Provenance.from_json(next(p.value for p in result.model.metadata_props if p.key == "edgeconv.provenance"))
    emitted = [n for n in graph.nodes if n.name in prov.node_origin]
    assert len(emitted) == 3 * 21
    assert {prov.node_origin[n.name]["from"] for n in emitted} == {"erf_0", "erf_1", "erf_2"}
    assert {prov.node_origin[n.name]["by"] for n in emitted} == {"erf_polynomial"}
    assert all(t.shape == [2, 8] for n in emitted for t in n.outputs)


def test_neighbourhood_signature_tells_alike_nodes_from_different_ones():
    graph = to_graph(_erf_chain(8))
    erfs = [n for n in graph.nodes if n.op == "Erf"]
    sigs = [neighbourhood(graph, n).signature() for n in erfs]
    assert len(set(sigs[2:-2])) == 1          # the middle of the chain looks alike
    assert sigs[0] != sigs[3] != sigs[-1]     # the ends see the graph input / output
    around = neighbourhood(graph, erfs[4])
    assert len(around.nodes) == 7             # 3 links each way: Mul Erf Mul [Erf] Mul Erf Mul
    erfs[4].outputs[0].shape = [2, 9]         # a different shape is a different key
    assert neighbourhood(graph, erfs[4]).signature() != sigs[4]


def test_infer_nodes_reuses_alike_groups():
    graph = to_graph(_erf_chain(2))
    seen: dict = {}
    for erf in [n for n in graph.nodes if n.op == "Erf"]:
        emitted = apply_rule_to_graph(graph, REGISTRY["erf_polynomial"], erf)
        infer_nodes(emitted, graph, seen)
        assert all(t.shape == [2, 8] and t.dtype == np.float32 for n in emitted for t in n.outputs)
    assert len(seen) == 1


def test_failed_check_replays_and_names_the_rule(monkeypatch):
    """The replay runs only when the single comparison fails (here: a broken exact rule)."""
    rule = REGISTRY["erf_polynomial"]
    broken = type(rule)(rule.name, rule.op, rule.emits, EXACT, rule.doc,
                        lambda rw, node: rw.out("Mul", [node.inputs[0], rw.scalar(2.0)]), rule.when,
                        rule.cost, rule.error_bound)
    monkeypatch.setitem(REGISTRY, "erf_polynomial", broken)
    model, matrix = _erf_chain(3), load_matrix()
    with monkeypatch.context() as m:
        counts = Counts(m)
        with pytest.raises(VerificationFailed, match="exact rule erf_polynomial changed the outputs of node erf_0"):
            legalize_mod.legalize(model, "tnn", "arm", matrix)
    assert counts.fixpoints == 2  # the rewrite, then the replay up to the first broken rewrite


def test_final_export_is_byte_identical_to_an_export_import_round_trip():
    """``_export_inferred`` skips the import of the old ``to_model(to_graph(infer(to_model(g))))``;
    the bytes must not change."""
    from converter.ir.graph import to_model
    from converter.legalize.rewrites.base import infer

    def rewritten():
        graph = to_graph(_erf_chain(3))
        for erf in [n for n in graph.nodes if n.op == "Erf"]:
            apply_rule_to_graph(graph, REGISTRY["erf_polynomial"], erf)
        return graph

    fast = legalize_mod._export_inferred(rewritten())
    slow = to_model(to_graph(infer(to_model(rewritten()))))
    assert fast.SerializeToString() == slow.SerializeToString()
    assert len(fast.graph.value_info) > 3 * 20  # the emitted tensors carry their inferred shapes
