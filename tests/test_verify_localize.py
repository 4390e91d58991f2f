"""Fault injection: a deliberately wrong rewrite deep in the zoo's ResNet must be named exactly.

The faulty rules are registered with the real rule engine (converter.legalize.rewrites.base.Rule +
REGISTRY, applied with apply_rule, which records provenance as every rule does); the transposed
weight is injected with a direct onnx-graphsurgeon edit plus ``record_node``, as a target mapping
would record it.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from converter.ir.graph import NameAllocator, Provenance, constant_value, provenance_of, to_graph, to_model
from converter.legalize.rewrites import REGISTRY, apply_rule
from converter.legalize.rewrites.base import EXACT, Rule
from converter.verify import Stage, Tolerances, onnx_runner, verify_stages
from converter.verify.localize import localize
from converter.runtimes.feeds import random_inputs
from converter.verify.localize import UNCHANGED, expose_intermediates

FAULTY = "faulty_negate_conv_weight"


def _negate_conv_weight(rw, node):
    """Conv(x, W, b) -> Conv(x, -W, b)   (deliberately wrong: flips the sign of the output)"""
    rw.out("Conv", [node.inputs[0], rw.const("w", -constant_value(node.inputs[1])), *node.inputs[2:]], node.attrs)


@pytest.fixture
def faulty_rule(monkeypatch):
    rule = Rule(FAULTY, "Conv", ("Conv",), EXACT, _negate_conv_weight.__doc__, _negate_conv_weight)
    monkeypatch.setitem(REGISTRY, FAULTY, rule)
    return rule


@pytest.fixture(scope="module")
def resnet(zoo_model):
    return zoo_model("resnet")


@pytest.fixture(scope="module")
def sample(resnet):
    return random_inputs(resnet, seed=0)[0]


def conv_names(model):
    return [n.name for n in model.graph.node if n.op_type == "Conv"]


@pytest.mark.parametrize("depth", [0, 2, 5, 8])
def test_faulty_rule_is_named_at_each_depth(resnet, sample, faulty_rule, depth):
    names = conv_names(resnet)
    assert len(names) == 9 and len(resnet.graph.node) == 23  # the zoo ResNet this test is sized for
    guilty = names[depth]
    broken = apply_rule(resnet, FAULTY, guilty)

    report = localize(resnet, broken, sample)

    first = report.first
    assert first is not None, report.summary()
    assert (first.node, first.op, first.by) == (guilty, "Conv", FAULTY)
    assert first.candidate_node == f"{guilty}/{FAULTY}/Conv"
    assert first.rmse > 0.05  # a sign flip is grossly wrong, not borderline
    before = [layer for layer in report.layers if layer.index < first.index]
    assert all(layer.rmse == 0.0 and layer.by == UNCHANGED for layer in before)
    assert len(report.layers) == 23 and not report.skipped  # every reference layer compared
    assert guilty in report.summary() and FAULTY in report.summary()


@pytest.mark.parametrize("depth", [1, 4, 6])
def test_transposed_weight_mapping_is_named(resnet, sample, depth):
    """A target mapping that transposes a 3x3 kernel (kh <-> kw) in place: same shapes, wrong values."""
    graph = to_graph(resnet)
    convs = [n for n in graph.nodes if n.op == "Conv" and tuple(n.attrs["kernel_shape"]) == (3, 3)]
    node = convs[depth]
    w = np.asarray(node.inputs[1].values)
    node.inputs[1] = gs.Constant(NameAllocator(graph)(node.inputs[1].name + "_t"), np.ascontiguousarray(w.swapaxes(2, 3)))
    provenance_of(graph).record_node(node.name, node.name, "faulty_transpose_mapping")
    broken = to_model(graph)

    first = localize(resnet, broken, sample).first
    assert first is not None
    assert (first.node, first.op, first.by) == (node.name, "Conv", "faulty_transpose_mapping")


def test_exact_rules_pass_and_carry_their_names(resnet, sample):
    """Real exact rules (Relu -> Max, Gemm -> MatMul+Add, Flatten -> Reshape): no divergence,
    and each rewritten layer is attributed to its rule."""
    model = resnet
    relus = [n.name for n in resnet.graph.node if n.op_type == "Relu"]
    for name in relus:
        model = apply_rule(model, "relu_to_max", name)
    model = apply_rule(model, "gemm_to_matmul_add", "gemm_0")
    model = apply_rule(model, "flatten_to_reshape", "flatten_0")

    report = localize(resnet, model, sample)

    assert report.first is None, report.summary()
    assert max(layer.rmse for layer in report.layers) < 1e-6
    by = {layer.node: layer.by for layer in report.layers}
    assert all(by[name] == "relu_to_max" for name in relus)
    assert by["gemm_0"] == "gemm_to_matmul_add" and by["flatten_0"] == "flatten_to_reshape"
    assert by["conv_0"] == UNCHANGED
    assert len(report.layers) == 23
    # The MatMul's output is new (the Add writes the original tensor): nothing to compare it with.
    assert len(report.unmapped_candidate) == 1


def test_fault_after_exact_rewrites_is_still_named(resnet, sample, faulty_rule):
    model = apply_rule(resnet, "relu_to_max", "relu_1")
    model = apply_rule(model, FAULTY, "conv_4")
    first = localize(resnet, model, sample).first
    assert (first.node, first.by) == ("conv_4", FAULTY)


def test_renamed_tensors_are_mapped_through_provenance(resnet, sample):
    graph = to_graph(resnet)
    tensors = graph.tensors()
    tensors["relu_3_1"].name = "relu_3_renamed"
    provenance_of(graph).record_tensor("relu_3_renamed", "relu_3_1")
    # and a fault right after it, on a renamed node recorded by a mapping
    conv = next(n for n in graph.nodes if n.name == "conv_5")
    conv.inputs[1] = gs.Constant("conv_5_w_scaled", np.asarray(conv.inputs[1].values) * 1.5)
    conv.name = "conv_5_mapped"
    provenance_of(graph).record_node("conv_5_mapped", "conv_5", "faulty_scale_mapping")
    candidate = to_model(graph)

    report = localize(resnet, candidate, sample)
    relu3 = next(layer for layer in report.layers if layer.node == "relu_3")
    assert relu3.candidate_tensor == "relu_3_renamed" and relu3.rmse == 0.0
    first = report.first
    assert (first.node, first.candidate_node, first.by) == ("conv_5", "conv_5_mapped", "faulty_scale_mapping")

    # Without the provenance the renamed tensor has no counterpart and is skipped, not guessed.
    blind = localize(resnet, candidate, sample, provenance=Provenance())
    assert "relu_3_1" in blind.skipped and "relu_3_renamed" in blind.unmapped_candidate
    assert blind.first.by == UNCHANGED


def test_verify_stages_localizes_the_failing_stage(resnet, faulty_rule):
    broken = apply_rule(resnet, FAULTY, "conv_6")
    samples = random_inputs(resnet, seed=5, samples=2)
    report = verify_stages(resnet, [
        Stage("normalized", onnx_runner(resnet), model=resnet),
        Stage("legalized", onnx_runner(broken), model=broken),
    ], samples, Tolerances())
    assert [s.status for s in report.stages] == ["pass", "fail"]
    failed = report.first_failure
    assert failed.name == "legalized" and failed.layers is not None
    assert (failed.layers.first.node, failed.layers.first.by) == ("conv_6", FAULTY)
    assert "conv_6" in report.summary() and FAULTY in report.summary()
    assert report.stages[0].layers is None  # passing stages are not localized


def test_layer_tolerance_decides(resnet, sample):
    """A small perturbation (0.1% of one weight tensor) is below 1e-3 rMSE but above 1e-6."""
    graph = to_graph(resnet)
    conv = next(n for n in graph.nodes if n.name == "conv_3")
    conv.inputs[1] = gs.Constant("conv_3_w_nudged", np.asarray(conv.inputs[1].values) * 1.001)
    nudged = to_model(graph)
    assert localize(resnet, nudged, sample, tolerance=1e-3).first is None
    assert localize(resnet, nudged, sample, tolerance=1e-6).first.node == "conv_3"


def test_unrunnable_candidate_reports_an_error_line(resnet, sample):
    graph = to_graph(resnet)
    next(n for n in graph.nodes if n.name == "relu_2").op = "EdgeconvNoSuchOp"
    report = localize(resnet, to_model(graph), sample)
    assert report.error and "\n" not in report.error and report.first is None and not report.ok
    assert report.summary().startswith("per-layer comparison failed")


def test_expose_keeps_the_original_outputs_first(resnet):
    exposed, order = expose_intermediates(resnet)
    outs = [o.name for o in exposed.graph.output]
    assert outs[0] == "output" and len(outs) == 23 and len(order) == 23
    assert len(exposed.graph.node) == len(resnet.graph.node)


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_verify.py"
    spec = importlib.util.spec_from_file_location("bench_verify", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hundreds_of_nodes_in_seconds():
    bench = _bench()
    reference = bench.deep_resnet(blocks=60, width=16, size=16)
    assert len(reference.graph.node) == 365
    candidate, guilty = bench.inject_sign_flip(reference, 45)
    sample = random_inputs(reference, seed=0)[0]
    start = time.perf_counter()
    report = localize(reference, candidate, sample)
    seconds = time.perf_counter() - start
    assert report.first.node == guilty and report.first.by == "faulty_rule"
    assert len(report.layers) == 365
    assert seconds < 10.0, f"localize took {seconds:.1f} s on 365 nodes"
