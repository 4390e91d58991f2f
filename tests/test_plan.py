"""The planner, the legalizer (onnxruntime self-check, provenance, retrain fitting) and `edgeconv plan`."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.demo import zoo
from converter.errors import VerificationFailed
from converter.ir.graph import Provenance, op_histogram
from converter.legalize.apply import legalize, run_onnx, seeded_inputs
from converter.matrix import load_matrix
from converter.legalize.plan import REMEDIES, plan_model
from converter.legalize.rewrites import REGISTRY
from matrix_doubles import OpSetMatrix


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


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
                    # a supported node may join its neighbours on the fallback unit (fewer partitions)
                    absorbed = e.remedy == "fallback" and e.reason.endswith("(fewer partitions)")
                    assert (e.verdict == "unsupported") == (e.remedy != "supported" and not absorbed), e
                    assert bool(e.rules) == (e.remedy in ("rewrite", "retrain")), e
                    assert all(r in REGISTRY for r in e.rules)
    assert all(seen[r] > 0 for r in REMEDIES), seen  # every kind of remedy occurs in the zoo


def _entry(plan, op):
    return next(e for e in plan.entries if e.op == op)


def test_plan_choices_on_the_zoo(zoo_model, matrix):
    # Edge TPU: no TRANSPOSE_CONV, no DepthToSpace, no Transpose: only the retrain form remains.
    e = _entry(plan_model(zoo_model("superres"), "tflite", "edgetpu", matrix), "ConvTranspose")
    assert (e.remedy, e.rules) == ("retrain", ["convtranspose_to_resize_conv"])
    # MACE GPU rejects output_padding: it fits in the end pads, so it only crops less.
    e = _entry(plan_model(zoo_model("superres"), "mace", "gpu", matrix), "ConvTranspose")
    assert (e.remedy, e.rules) == ("rewrite", ["convtranspose_output_padding_to_pad"])
    # TFLite has no Erf builtin: an Erf outside the GELU pattern gets the approximate polynomial,
    # with its bound in the reason; the transformer's Erf-GELU is left for the exporter's GELU.
    e = _entry(plan_model(_lone_erf_model(), "tflite", "gpu", matrix), "Erf")
    assert e.rules == ["erf_polynomial"] and "approximate" in e.reason
    assert _entry(plan_model(zoo_model("transformer"), "tflite", "gpu", matrix), "Erf").remedy == "supported"
    # The detector's trailing rank-5 ops on TFLite GPU go to post-processing.
    plan = plan_model(zoo_model("detector"), "tflite", "gpu", matrix)
    assert {e.op for e in plan.by_remedy("postprocess")} >= {"ReduceMax", "Mul"}


def _lone_erf_model(also_read=False):
    """y = Erf(x) * 3, or (``also_read``) a GELU whose Erf result is also a model output."""
    if also_read:
        nodes = [helper.make_node("Div", ["x", "k_sqrt2"], ["u"], name="div"),
                 helper.make_node("Erf", ["u"], ["e"], name="erf"),
                 helper.make_node("Add", ["e", "k_one"], ["a"], name="add"),
                 helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
                 helper.make_node("Mul", ["m", "k_half"], ["y"], name="half"),
                 helper.make_node("Neg", ["e"], ["z"], name="neg")]
        outputs = ["y", "z"]
    else:
        nodes = [helper.make_node("Erf", ["x"], ["e"], name="erf"), helper.make_node("Mul", ["e", "k_three"], ["y"], name="mul")]
        outputs = ["y"]
    consts = {"k_sqrt2": np.sqrt(2.0), "k_one": 1.0, "k_half": 0.5, "k_three": 3.0}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()
                               if any(k in n.input for n in nodes)])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


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


def test_legalize_zoo_exact_with_provenance(zoo_model, tmp_path):
    # Without ConvTranspose on MACE's GPU (an overlay) and no Slice there: the exact DepthToSpace
    # form, its crop as a Conv — a two-rule chain.
    overlay = tmp_path / "no_deconv.yaml"
    overlay.write_text("frameworks:\n  mace:\n    ops:\n      ConvTranspose: {supported: []}\n")
    model = zoo_model("superres")
    result = legalize(model, "mace", "gpu", load_matrix(overlays=[overlay]))
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


def test_a_port_with_an_architecture_change_says_why_it_differs(zoo_onnx_path, tmp_path):
    """The unet on the Edge TPU: its ConvTransposes become Resize + Conv (remedy 2), so the
    legalized stage differs from the original; the reason says that this is expected and how to
    retrain, with the default fit's held-out errors."""
    from converter.port import port

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", input=rng.uniform(0, 1, (8, 1, 3, 32, 32)).astype(np.float32))
    result = port(str(zoo_onnx_path("unet")), to="tflite", hw="edgetpu", out=tmp_path / "out", calibration=str(tmp_path / "calib.npz"))
    assert result.status == "verify_failed"
    assert "stage 'legalized' differs" in result.reason
    assert ("expected of an architecture change: convtranspose_0, convtranspose_1 replaced by a block"
            in result.reason) and "--retrain-hook" in result.reason
    errors = [float(e.split()[-1]) for e in
              result.reason.split("held-out RMS error ")[1].split(";")[0].split(", ")]
    assert len(errors) == 2 and all(0 < e < 1 for e in errors)


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
    from converter.legalize.rewrites.base import rule

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

    from converter.cli.commands import plan as plan_command

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
    # rknpu: no Deconvolution, but an exact rewrite through Reshape/Transpose, which the RKNPU
    # converters register (rknpu_reshape_layer.cc:98, rknpu_permute_layer.cc:44)
    res = runner.invoke(app, ["plan", path, "--to", "tnn", "--hw", "rknpu", "--json"])
    assert res.exit_code == 0, res.output
    (plan,) = json.loads(res.output)["plans"]
    assert plan["counts"]["rewrite"] == 1 and plan["counts"]["custom"] == 0 and plan["counts"]["unsupported"] == 0
    res = runner.invoke(app, ["plan", path, "--to", "all", "--json"])
    assert len(json.loads(res.output)["plans"]) == sum(len(load_matrix().hardware(f)) for f in load_matrix().frameworks)


def test_legalize_is_deterministic(zoo_model, matrix):
    model = zoo_model("transformer")
    first = legalize(model, "mace", "gpu", matrix).model.SerializeToString()
    assert legalize(model, "mace", "gpu", matrix).model.SerializeToString() == first



# ------------------------------------------------------------------ Erf-GELU stays whole for TFLite's GELU


def test_plan_and_legalize_keep_the_gelu_erf_for_tflite(zoo_model, matrix):
    from converter.legalize.check import check_model

    model = zoo_model("transformer")
    for hw in ("cpu", "gpu"):
        assert not [v for v in check_model(model, "tflite", hw, matrix).unsupported if v.op == "Erf"], hw
        assert _entry(plan_model(model, "tflite", hw, matrix), "Erf").remedy == "supported"
    result = legalize(model, "tflite", "cpu", matrix)
    assert result.applied == [] and not result.unresolved
    assert op_histogram(result.model) == op_histogram(model) and op_histogram(model)["Erf"] == 1
    # NNAPI never delegates GELU, so there the Erf is still decomposed or left to a custom layer.
    assert _entry(plan_model(model, "tflite", "nnapi", matrix), "Erf").remedy != "supported"
    # An Erf outside the pattern (or whose value something else also reads) is still rewritten.
    for also_read in (False, True):
        lone = _lone_erf_model(also_read)
        result = legalize(lone, "tflite", "cpu", matrix)
        assert [r for r, _ in result.applied] == ["erf_polynomial"], also_read
        assert "Erf" not in op_histogram(result.model) and result.max_abs_error <= 1e-5


def test_port_transformer_to_tflite_has_one_gelu_per_gelu(tmp_path, zoo_onnx_path, zoo_model):
    """`edgeconv port transformer --to tflite --hw cpu`: the exact GELU becomes exactly one builtin GELU
    (no ERF, no polynomial), and LiteRT's result matches onnxruntime on the original model."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    root = Path(__file__).resolve().parents[1]
    source, out = zoo_onnx_path("transformer"), tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "converter", "port", str(source), "--to", "tflite", "--hw", "cpu",
                          "-o", str(out)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr + res.stdout
    report = json.loads((out / "report.json").read_text())
    gelus = op_histogram(zoo_model("transformer"))["Erf"]  # one Erf per GELU in the zoo transformer
    ops = report["artifact"]["meta"]["ops"]
    assert gelus == 1 and ops["GELU"] == gelus
    assert not {"ERF", "SIGN", "ABS"} & set(ops), ops  # no trace of the polynomial
    # its one EXP is the attention softmax over 16 keys, decomposed where the keys are strided
    # (TFLite's short-axis rule: EXP, SUM, DIV instead of SOFTMAX), not the polynomial's
    assert ops.get("EXP", 0) == op_histogram(zoo_model("transformer"))["Softmax"] == 1 and "SOFTMAX" not in ops
    assert report["applied_rules"] == []
    (tflite,) = [out / f for f in report["artifact"]["files"] if f.endswith(".tflite")]
    # LiteRT's own reading of the file (builtin resolver only), independent of the meta.
    interp = Interpreter(model_path=str(tflite),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    assert [op["op_name"] for op in interp._get_ops_details()].count("GELU") == gelus  # noqa: SLF001
    x = np.random.default_rng(7).standard_normal((1, 16, 32)).astype(np.float32) * 2
    (inp,), (outp,) = interp.get_input_details(), interp.get_output_details()
    assert list(inp["shape"]) == [1, 16, 32]
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    got = interp.get_tensor(outp["index"])
    want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert float(np.max(np.abs(got - want))) <= 1e-4


def _rank5_head() -> onnx.ModelProto:
    """A detection head's box branch on a 1x1 feature map (SSD's last levels): Conv -> Reshape to
    rank 5 -> Transpose -> Reshape to rank 3.  On MACE's GPU the Transpose has no kernel
    (trailing: post-processing) while the rank-5 Reshape alone lowers (lower_rank_reshape: the
    permutation moves unit dims only), but that rewrite covers the whole rank-5 component, the
    Transpose included."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((12, 3, 1, 1)).astype(np.float32), "w")
    s5 = numpy_helper.from_array(np.array([1, 3, 4, 1, 1], np.int64), "s5")
    s3 = numpy_helper.from_array(np.array([1, 3, 4], np.int64), "s3")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "s5"], ["r5"], name="to_rank5"),
             helper.make_node("Transpose", ["r5"], ["t5"], name="boxes_transpose", perm=[0, 3, 4, 1, 2]),
             helper.make_node("Reshape", ["t5", "s3"], ["boxes"], name="to_rank3")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 1])],
                              [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 3, 4])], [w, s5, s3])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def test_a_rewrite_never_rewrites_a_node_moved_to_post_processing(matrix, tmp_path):
    """Found by real_zoo (ssdlite/retinanet heads on mace:gpu): the rank lowering of the rank-5
    Reshape rewrote the Transpose planned for post-processing, and the split found no such node.
    The Reshape now follows the Transpose into post-processing, and the split is exact."""
    from converter.postproc import split

    model = _rank5_head()
    result = legalize(model, "mace", "gpu", matrix)
    remedies = {e.node: e.remedy for e in result.plan.entries}
    assert remedies == {"conv": "supported", "to_rank5": "postprocess", "boxes_transpose": "postprocess",
                        "to_rank3": "postprocess"}
    reason = next(e.reason for e in result.plan.entries if e.node == "to_rank5")
    assert "lower_rank_reshape would also rewrite boxes_transpose" in reason
    assert result.applied == [] and result.unresolved == []
    cut = split(result.model, result.postprocess_nodes, out_dir=tmp_path)
    assert op_histogram(cut.model) == {"Conv": 1}
    x = seeded_inputs(model, 0)
    expected = run_onnx(model, x)["boxes"]
    post = cut.postprocess(run_onnx(cut.model, x))
    assert np.max(np.abs(post["boxes"] - expected)) == 0.0  # data movement only: exact


def test_plan_names_what_the_edge_tpu_compiler_may_leave_on_the_cpu(tmp_path):
    """Coral maps RESIZE_BILINEAR "depending on input/output size": supported, and named with the
    nodes a compiler that stops there would leave to the CPU (the matrix's ``may_stay_on_cpu``)."""
    import typer
    from onnx import TensorProto, helper
    from typer.testing import CliRunner

    from converter.cli.commands import plan as plan_command

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    scales = numpy_helper.from_array(np.array([1, 1, 4, 4], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], name="up", mode="linear"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32, 32])], [w, scales])
    path = tmp_path / "up.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    app = typer.Typer()
    plan_command.register(app)
    app.command("noop")(lambda: None)
    res = CliRunner().invoke(app, ["plan", str(path), "--to", "tflite", "--hw", "edgetpu"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the console wraps long lines
    assert text.count("may run on CPU:") == 1
    assert text[text.index("may run on CPU:"):] == ("may run on CPU: resize_0 (Resize 1x4x8x8 -> 1x4x32x32): the compiler may leave it on the CPU, and "
                     "the 1 node(s) after it (\"Depending on input/output size, this operation may not be mapped to "
                     "the Edge TPU to avoid loss in precision\", "
                     "dgist-datalab/Datalab_Intern@fc0ee50:Edge_TPU/convert_model_for_Edge_TPU.md#L35-L36)")
    res = CliRunner().invoke(app, ["plan", str(path), "--to", "tflite", "--hw", "gpu", "--json"])
    assert json.loads(res.output)["plans"][0]["may_stay_on_cpu"] == []
