"""The planner, the legalizer (onnxruntime self-check, provenance, retrain fitting) and `edgeconv plan`."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter import zoo
from converter.errors import VerificationFailed
from converter.graph import Provenance, op_histogram
from converter.legalize import legalize, run_onnx, seeded_inputs
from converter.matrix import load_matrix
from converter.plan import REMEDIES, plan_model
from converter.rewrites import REGISTRY


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@dataclass
class Verdict:
    node: str
    op: str
    status: str
    reason: str

    @property
    def supported(self):
        return self.status != "unsupported"


class OpSetMatrix:
    """A matrix where exactly the listed op types are unsupported (op-level only)."""

    def __init__(self, missing):
        self.missing = set(missing)

    def supports_op(self, framework, hw, op):
        return op not in self.missing

    def check_node(self, node, framework, hw):
        ok = node.op not in self.missing
        return Verdict(node.name, node.op, "supported" if ok else "unsupported",
                       "ok" if ok else f"{node.op}: missing here")


def test_plan_explains_every_node_of_the_zoo_everywhere(zoo_model, matrix):
    seen = {r: 0 for r in REMEDIES}
    for name in zoo.NAMES:
        model = zoo_model(name)
        for fw in matrix.frameworks:
            for hw in matrix.hardware(fw):
                plan = plan_model(model, fw, hw, matrix)
                assert [e.node for e in plan.entries] == [n.name for n in model.graph.node]
                for e in plan.entries:
                    seen[e.remedy] += 1
                    assert e.remedy in REMEDIES and e.reason
                    assert (e.verdict == "unsupported") == (e.remedy != "supported"), e
                    assert bool(e.rules) == (e.remedy in ("rewrite", "retrain")), e
                    assert all(r in REGISTRY for r in e.rules)
    assert all(seen[r] > 0 for r in REMEDIES), seen  # every kind of remedy occurs in the zoo


def _entry(plan, op):
    return next(e for e in plan.entries if e.op == op)


def test_plan_choices_on_the_zoo(zoo_model, matrix):
    # Edge TPU: no TRANSPOSE_CONV, no DepthToSpace, no Transpose: only the retrain form remains.
    e = _entry(plan_model(zoo_model("superres"), "tflite", "edgetpu", matrix), "ConvTranspose")
    assert (e.remedy, e.rules) == ("retrain", ["convtranspose_to_resize_conv"])
    # MACE GPU rejects output_padding and has no Slice: exact DepthToSpace form, crop as a Conv.
    e = _entry(plan_model(zoo_model("superres"), "mace", "gpu", matrix), "ConvTranspose")
    assert (e.remedy, e.rules) == ("rewrite", ["convtranspose_to_depth_to_space", "slice_to_shift_conv"])
    # TFLite has no Erf builtin: the approximate polynomial, with its bound in the reason.
    e = _entry(plan_model(zoo_model("transformer"), "tflite", "gpu", matrix), "Erf")
    assert e.rules == ["erf_polynomial"] and "approximate" in e.reason
    # The detector's trailing rank-5 ops on TFLite GPU go to post-processing.
    plan = plan_model(zoo_model("detector"), "tflite", "gpu", matrix)
    assert {e.op for e in plan.by_remedy("postprocess")} >= {"ReduceMax", "Mul"}


def _sub_softmax_model():
    nodes = [helper.make_node("Sub", ["x", "z"], ["d"], name="sub"),
             helper.make_node("Softmax", ["d"], ["s"], name="softmax", axis=-1),
             helper.make_node("Gemm", ["s", "w"], ["y"], name="gemm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32), "w")])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_chain_search_composes_rules():
    model = _sub_softmax_model()
    plan = plan_model(model, "fw", "hw", OpSetMatrix({"Sub", "Neg", "Softmax"}))
    assert _entry(plan, "Sub").rules == ["sub_to_add_mul"]
    assert _entry(plan, "Softmax").rules == ["softmax_decompose", "sub_to_add_mul"]
    result = legalize(model, "fw", "hw", OpSetMatrix({"Sub", "Neg", "Softmax"}))
    assert op_histogram(result.model) == {"Add": 2, "Div": 1, "Exp": 1, "Gemm": 1, "Mul": 2, "ReduceMax": 1, "ReduceSum": 1}
    assert result.max_abs_error <= 1e-6
    assert [r for r, _ in result.applied] == ["sub_to_add_mul", "softmax_decompose", "sub_to_add_mul"]


def test_cycles_end_and_fall_back_to_custom_or_postprocess():
    # Gemm ↔ MatMul ↔ Conv all missing: the search must stop, not loop.
    model = _sub_softmax_model()
    plan = plan_model(model, "fw", "hw", OpSetMatrix({"Gemm", "MatMul", "Conv", "Softmax", "ReduceMax"}))
    gemm, softmax = _entry(plan, "Gemm"), _entry(plan, "Softmax")
    assert gemm.rules == [] and gemm.remedy in ("postprocess", "custom")
    assert softmax.remedy in ("postprocess", "custom")
    assert "ReduceMax" in softmax.reason  # says which emitted op is missing


def test_legalize_zoo_exact_with_provenance(zoo_model, matrix):
    model = zoo_model("superres")
    result = legalize(model, "mace", "gpu", matrix)
    assert result.applied == [("convtranspose_to_depth_to_space", "convtranspose_0"),
                              ("slice_to_shift_conv", "convtranspose_0/convtranspose_to_depth_to_space/Slice")]
    ops = op_histogram(result.model)
    assert "ConvTranspose" not in ops and "Slice" not in ops and ops["DepthToSpace"] == 1
    assert result.max_abs_error <= 1e-5 and not result.unresolved
    prov = Provenance.from_json(next(p.value for p in result.model.metadata_props if p.key == "edgeconv.provenance"))
    # Every node the rules emitted points back at the original ConvTranspose.
    new_nodes = [n.name for n in result.model.graph.node if n.name not in {m.name for m in model.graph.node}]
    assert new_nodes and all(prov.node_origin[n]["from"] == "convtranspose_0" for n in new_nodes)
    assert {prov.node_origin[n]["by"] for n in new_nodes} == {"convtranspose_to_depth_to_space", "slice_to_shift_conv"}
    assert [o.name for o in result.model.graph.output] == [o.name for o in model.graph.output]


def test_legalize_retrain_fits_weights(zoo_model, matrix):
    model = zoo_model("unet")
    result = legalize(model, "tflite", "edgetpu", matrix)
    assert [r for r, _ in result.applied] == ["convtranspose_to_resize_conv"] * 2
    assert len(result.retrain_reports) == 2
    assert all(r.error_after < r.error_before for r in result.retrain_reports)
    assert "ConvTranspose" not in op_histogram(result.model)
    assert result.max_abs_error is not None and result.max_abs_error > 0  # not exact, and says so


def test_legalize_user_hook_spec(zoo_model, matrix, tmp_path, monkeypatch):
    (tmp_path / "unet_hooks.py").write_text(textwrap.dedent("""
        import torch
        calls = []
        def zero_bias(blocks):
            calls.append(sorted(blocks.node_names))
            for key, block in blocks.items():
                assert key in blocks.teachers
                with torch.no_grad():
                    block.conv.bias.zero_()
            return blocks
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    result = legalize(zoo_model("unet"), "tflite", "edgetpu", matrix, retrain_hook="unet_hooks:zero_bias")
    import unet_hooks

    assert unet_hooks.calls == [["convtranspose_0", "convtranspose_1"]]
    biases = [i for i in result.model.graph.initializer if i.name.endswith("_fitted") and len(i.dims) == 1]
    assert len(biases) == 2 and all(not numpy_helper.to_array(b).any() for b in biases)


def test_broken_exact_rule_is_reported_with_its_node(monkeypatch):
    from converter.rewrites.base import rule

    @rule("Relu", emits=["Abs"], name="broken_relu_to_abs")
    def broken(rw, node):
        """before: Relu(x) ─► y          after: Abs(x) ─► y   (wrong on purpose)"""
        rw.out("Abs", [node.inputs[0]])

    try:
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="the_relu")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = onnx.shape_inference.infer_shapes(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
        with pytest.raises(VerificationFailed, match="exact rule broken_relu_to_abs .* node the_relu"):
            legalize(model, "fw", "hw", OpSetMatrix({"Relu", "Max"}))
    finally:
        del REGISTRY["broken_relu_to_abs"]


def test_legalized_zoo_matches_original_everywhere_it_rewrites(zoo_model, matrix):
    """Every zoo model × target whose plan uses only exact/approximate rules keeps its outputs."""
    checked = 0
    for name in ("mobilenetv2", "transformer", "normalized_input"):
        model = zoo_model(name)
        feeds = seeded_inputs(model, 1)
        ref = run_onnx(model, feeds)
        for fw in matrix.frameworks:
            for hw in matrix.hardware(fw):
                result = legalize(model, fw, hw, matrix, verify=False)
                if not result.applied:
                    continue
                got = run_onnx(result.model, feeds)
                for k in ref:
                    assert np.max(np.abs(got[k] - ref[k])) <= 1e-4, (name, fw, hw)
                checked += 1
    assert checked >= 10


def test_cli_plan_json_and_exit_codes(zoo_onnx_path):
    import typer
    from typer.testing import CliRunner

    from converter.commands import plan as plan_command

    app = typer.Typer()
    plan_command.register(app)
    app.command("noop")(lambda: None)  # typer needs two commands to keep the subcommand name
    runner = CliRunner()
    path = str(zoo_onnx_path("superres"))
    res = runner.invoke(app, ["plan", path, "--to", "tflite", "--hw", "edgetpu", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (plan,) = doc["plans"]
    assert plan["counts"]["retrain"] == 1 and plan["counts"]["rewrite"] == 5
    res = runner.invoke(app, ["plan", path, "--to", "tnn", "--hw", "rknpu"])
    assert res.exit_code == 3 and "custom" in res.output  # rknpu: no Deconvolution, nothing legal
    res = runner.invoke(app, ["plan", path, "--to", "all", "--json"])
    assert len(json.loads(res.output)["plans"]) == sum(len(load_matrix().hardware(f)) for f in load_matrix().frameworks)


def test_legalize_is_deterministic(zoo_model, matrix):
    model = zoo_model("transformer")
    first = legalize(model, "mace", "gpu", matrix).model.SerializeToString()
    assert legalize(model, "mace", "gpu", matrix).model.SerializeToString() == first
