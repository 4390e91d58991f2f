"""Issue 19, end to end: models outside the zoo legalized for accelerators, exported, and run in
the frameworks' real runtimes (LiteRT; TNN's and MACE's own runners from ../shared/runtimes;
CoreML's saved program through the MIL executor) against onnxruntime — with no custom op in any
file — and the planner's rule that data movement is never a custom layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from accelerator_models import conv_transpose, einsum_attention, gelu_mlp, grouped_convs, r3d, swin_windows, vit
from converter import targets
from converter.errors import BadInput
from converter.ir.graph import op_histogram
from converter.legalize.apply import legalize, run_onnx
from converter.matrix import load_matrix
from converter.frontend.normalize import normalize, seeded_inputs
from converter.legalize.plan import DATA_MOVEMENT, plan_model
from converter.targets.base import ExportOptions
from matrix_doubles import OpSetMatrix
from rank_runtimes import mace_run, tnn_run
from tflite_helpers import litert_ops, opcodes

ATOL = 1e-4


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def port_files(model, fw, hw, tmp_path, matrix):
    """normalize → legalize (no custom layer, nothing unresolved) → export; (normalized, result, artifact)."""
    normalized = normalize(model)
    result = legalize(normalized, fw, hw, matrix)
    assert not result.custom_nodes and not result.unresolved, (result.custom_nodes, result.unresolved)
    art = targets.get(fw).export(result.model, tmp_path / f"{fw}-{hw}", hw, ExportOptions(name="m"))
    return normalized, result, art


def run_real(fw, art, feeds, tmp_path):
    if fw == "tnn":  # (the host build has the X86 and NAIVE devices; ARM files run on X86)
        return tnn_run(art, feeds, tmp_path / "tnn_run", device="NAIVE" if art.hw == "naive" else "X86")
    if fw == "mace":
        return mace_run(art, feeds, tmp_path / "mace_run")
    return targets.get(fw).run(art, feeds)  # LiteRT; CoreML: the saved ML Program, op by op


def max_error(ref, got) -> float:
    worst = 0.0
    for name, r in ref.items():
        assert got[name].shape == r.shape, (name, got[name].shape, r.shape)
        assert float(np.max(np.abs(r))) > 1e-3, f"{name}: a trivially small reference"
        worst = max(worst, float(np.max(np.abs(got[name].astype(np.float64) - r))))
    return worst


def check_in_runtime(model, fw, hw, tmp_path, matrix, atol=ATOL):
    normalized, result, art = port_files(model, fw, hw, tmp_path, matrix)
    feeds = seeded_inputs(normalized, 0)
    err = max_error(run_onnx(normalized, feeds), run_real(fw, art, feeds, tmp_path))
    assert err <= atol, f"{fw}/{hw}: max abs error {err:.3g}"
    return result, art, err


def tflite_tensor_ranks(path) -> list[int]:
    from converter.targets.tflite._generated import schema_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(open(path, "rb").read(), 0))
    return [len(t.shape) for sub in model.subgraphs for t in sub.tensors if t.shape is not None]


# ----------------------------------------------------------------------------------------------
# ViT: rank-5 qkv on the TFLite GPU/NNAPI delegates and MACE; exact GELU on NNAPI and MACE


@pytest.fixture(scope="module")
def vit_model():
    return vit()


@pytest.mark.parametrize("hw", ["gpu", "nnapi"])
def test_vit_on_tflite_accelerators_is_builtin_only_and_rank_4(vit_model, hw, tmp_path, matrix):
    result, art, _ = check_in_runtime(vit_model, "tflite", hw, tmp_path, matrix)
    rules = {r for r, _ in result.applied}
    assert "attention_qkv_split_at_reshape" in rules  # three projections, no rank-5 tensor
    path = art.files[0]
    ops = opcodes(path)
    assert "CUSTOM" not in ops and litert_ops(path)  # loads with LiteRT's builtin-only resolver
    assert max(tflite_tensor_ranks(path)) <= 4
    assert ("GELU" in ops) == (hw == "gpu")  # NNAPI has no GELU: the Erf is spelled in NNAPI ops
    if hw == "nnapi":
        assert "erf_polynomial_minmax" in rules and "SIGN" not in ops


def test_vit_on_mace_cpu_runs_in_mace_run(vit_model, tmp_path, matrix):
    result, art, _ = check_in_runtime(vit_model, "mace", "cpu", tmp_path, matrix)
    assert {"attention_qkv_split_at_transpose", "erf_polynomial", "exp_via_sigmoid"} <= {r for r, _ in result.applied}
    assert "Erf" not in op_histogram(result.model) and "Exp" not in op_histogram(result.model)


@pytest.mark.parametrize("fw, hw", [("tflite", "gpu"), ("tflite", "nnapi"), ("mace", "cpu")])
def test_swin_windows_lower_to_rank_4(fw, hw, tmp_path, matrix):
    result, art, _ = check_in_runtime(swin_windows(), fw, hw, tmp_path, matrix)
    rules = {r for r, _ in result.applied}
    assert rules and all(r.startswith("lower_rank_") for r in rules), rules
    if fw == "tflite":
        assert max(tflite_tensor_ranks(art.files[0])) <= 4 and "CUSTOM" not in opcodes(art.files[0])


def test_vit_port_to_tflite_gpu_verifies_in_litert(vit_model, tmp_path):
    from converter.port import port

    src = tmp_path / "vit.onnx"
    onnx.save(vit_model, src)
    res = port(str(src), to="tflite", hw="gpu", out=tmp_path / "out")
    assert res.status == "ok", res.reason
    stages = {s["name"]: s["status"] for s in res.report["verification"]["stages"]}
    assert stages["target:tflite"] == "pass"  # run in LiteRT, not skipped for custom kernels
    assert not (tmp_path / "out" / "custom").exists()
    remedies = {e["op"]: e["remedy"] for e in res.report["plan"]["entries"] if e["verdict"] == "unsupported"}
    assert set(remedies.values()) == {"rewrite"}, remedies


# ----------------------------------------------------------------------------------------------
# Einsum everywhere, Erf on MACE, GELU and grouped convolutions on NNAPI, 3-D conv on TNN


@pytest.mark.parametrize("fw, hw", [("tflite", "cpu"), ("tnn", "x86"), ("mace", "cpu"), ("coreml", "cpu")])
def test_einsum_runs_on_every_target(fw, hw, tmp_path, matrix):
    model = einsum_attention(ellipsis=fw == "coreml")  # CoreML maps explicit equations itself
    result, _, _ = check_in_runtime(model, fw, hw, tmp_path, matrix)
    rewritten = [n for r, n in result.applied if r == "einsum_to_matmul"]
    assert len(rewritten) == (2 if fw == "coreml" else 3)
    assert op_histogram(result.model).get("Einsum", 0) == (1 if fw == "coreml" else 0)


def test_exact_gelu_on_mace_runs_in_mace_run(tmp_path, matrix):
    result, _, err = check_in_runtime(gelu_mlp(), "mace", "cpu", tmp_path, matrix)
    assert [r for r, _ in result.applied] == ["erf_polynomial", "exp_via_sigmoid"]


def test_gelu_on_nnapi_is_not_the_gelu_builtin(tmp_path, matrix):
    result, art, _ = check_in_runtime(gelu_mlp(), "tflite", "nnapi", tmp_path, matrix)
    ops = opcodes(art.files[0])
    assert "GELU" not in ops and "CUSTOM" not in ops
    assert {"ABS", "EXP", "MAXIMUM", "MINIMUM"} <= set(ops)


def test_grouped_conv_on_nnapi_is_split_depthwise_kept(tmp_path, matrix):
    from converter.legalize.check import check_model

    model = normalize(grouped_convs())
    verdicts = {v.node: v for v in check_model(model, "tflite", "nnapi", matrix).verdicts}
    grouped = verdicts["conv_0"]
    assert grouped.status == "unsupported" and grouped.source.endswith("nnapi_delegate.cc#L2527-L2529")
    assert verdicts["conv_1"].status == "supported"  # a depthwise multiplier is DEPTHWISE_CONV_2D
    result, art, _ = check_in_runtime(model, "tflite", "nnapi", tmp_path, matrix)
    assert [r for r, _ in result.applied] == ["conv_group_split"]
    names = [op["op_name"] for op in litert_ops(art.files[0])]
    assert names.count("CONV_2D") == 3 and names.count("DEPTHWISE_CONV_2D") == 1
    # no grouped CONV_2D left: every filter's input channels are its input's channels
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(art.files[0]))
    details = {d["index"]: d for d in interp.get_tensor_details()}
    for op in interp._get_ops_details():  # noqa: SLF001
        if op["op_name"] == "CONV_2D":
            assert details[op["inputs"][0]]["shape"][-1] == details[op["inputs"][1]]["shape"][-1]


@pytest.mark.parametrize("hw", ["x86", "naive"])
def test_r3d_conv3d_on_tnn_runs_in_tnn(hw, tmp_path, matrix):
    result, art, _ = check_in_runtime(r3d(), "tnn", hw, tmp_path, matrix)
    assert [r for r, _ in result.applied].count("conv3d_to_conv2d") == 6
    assert "Convolution3D" not in art.meta["layer_types"]


def test_conv1d_on_tnn_runs_in_tnn(tmp_path, matrix):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 20])],
                              [numpy_helper.from_array(rng.standard_normal((6, 4, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result, _, _ = check_in_runtime(model, "tnn", "arm", tmp_path, matrix)
    assert [r for r, _ in result.applied] == ["conv1d_to_conv2d"]


# ----------------------------------------------------------------------------------------------
# ConvTranspose, edge Pad on CoreML, one-input Concat on TNN

DECONVS = {
    "output_padding_beyond_end_pad": dict(strides=[3, 3], output_padding=[2, 1], pads=[1, 0, 0, 0]),
    "dilations_and_groups": dict(group=2, dilations=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]),
}


@pytest.mark.parametrize("case", sorted(DECONVS))
@pytest.mark.parametrize("fw, hw", [("tflite", "cpu"), ("coreml", "cpu"), ("tnn", "x86")])
def test_conv_transpose_cases(case, fw, hw, tmp_path, matrix):
    result, art, _ = check_in_runtime(conv_transpose(**DECONVS[case]), fw, hw, tmp_path, matrix)
    if case == "output_padding_beyond_end_pad" and fw != "tflite":
        assert [r for r, _ in result.applied] == ["convtranspose_output_padding_to_pad"]
    if fw == "tflite":
        # The Relu after the per-group CONCATENATION stays a RELU: LiteRT's concatenation kernel
        # refuses a fused activation (the file loads with the builtin-only resolver).
        assert litert_ops(art.files[0])


def test_edge_pad_on_coreml(tmp_path, matrix):
    nodes = [helper.make_node("Pad", ["x", "p"], ["t"], mode="edge"), helper.make_node("Sigmoid", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.int64([0, 0, 1, 2, 0, 0, 3, 1]), "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result, art, err = check_in_runtime(model, "coreml", "cpu", tmp_path, matrix, atol=1e-6)
    assert not result.applied


def test_one_input_concat_is_normalized_away_for_tnn(tmp_path, matrix):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["r"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w")])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                                ir_version=8))
    # As is, TNN's kernel refuses it (x86_concat_layer_acc.cc: "invalid inputs count").
    raw = targets.get("tnn").export(model, tmp_path / "raw", "x86", ExportOptions(name="m"))
    with pytest.raises(AssertionError, match="invalid inputs count"):
        tnn_run(raw, seeded_inputs(model, 0), tmp_path / "raw_run")
    assert "Concat" not in op_histogram(normalize(model))
    check_in_runtime(model, "tnn", "x86", tmp_path, matrix, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Data movement is never a custom layer


def data_movement_model() -> onnx.ModelProto:
    """Every data-movement op, in a chain no trailing cut can take (it ends in Erf, which has no
    post-processing kernel): x → Reshape → Transpose → Gather → Slice → Concat → Unsqueeze → Squeeze
    → Flatten → Expand → Tile → Split → Reshape → DepthToSpace → SpaceToDepth → Identity → Erf."""
    N = helper.make_node
    nodes = [N("Reshape", ["x", "s1"], ["a"], name="reshape"), N("Transpose", ["a"], ["b"], perm=[0, 2, 1], name="transpose"),
             N("Gather", ["b", "gi"], ["c"], axis=1, name="gather"), N("Slice", ["c", "st", "en", "ax"], ["d"], name="slice"),
             N("Concat", ["d", "d"], ["e"], axis=2, name="concat"), N("Unsqueeze", ["e", "u0"], ["f"], name="unsqueeze"),
             N("Squeeze", ["f", "u0"], ["g"], name="squeeze"), N("Flatten", ["g"], ["h"], axis=1, name="flatten"),
             N("Expand", ["h", "es"], ["i"], name="expand"), N("Tile", ["i", "reps"], ["j"], name="tile"),
             N("Split", ["j", "sp"], ["k1", "k2"], axis=1, name="split"), N("Reshape", ["k1", "s2"], ["l"], name="reshape_2"),
             N("DepthToSpace", ["l"], ["m"], blocksize=2, name="depthtospace"),
             N("SpaceToDepth", ["m"], ["n"], blocksize=2, name="spacetodepth"), N("Identity", ["n"], ["o"], name="identity"),
             N("Erf", ["o"], ["y"], name="erf")]
    inits = {"s1": np.int64([1, 4, 48]), "gi": np.int64([0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22]),
             "st": np.int64([0]), "en": np.int64([10]), "ax": np.int64([1]), "u0": np.int64([0]),
             "es": np.int64([2, 80]), "reps": np.int64([1, 2]), "sp": np.int64([80, 80]), "s2": np.int64([2, 16, 1, 5])}
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_data_movement_model_covers_every_data_movement_op():
    assert {n.op_type for n in data_movement_model().graph.node} >= DATA_MOVEMENT


def test_data_movement_is_never_a_custom_layer_on_any_target(matrix):
    model = data_movement_model()
    for fw in matrix.frameworks:
        for hw in matrix.hardware(fw):
            for e in plan_model(model, fw, hw, matrix).entries:
                if e.op in DATA_MOVEMENT:
                    assert e.remedy != "custom", (fw, hw, e)
                    if e.remedy == "unsupported":
                        assert "data movement is never a custom layer" in e.reason and e.verdict == "unsupported"


@pytest.mark.parametrize("op", sorted(DATA_MOVEMENT))
def test_each_data_movement_op_without_a_chain_is_unsupported_not_custom(op):
    model = data_movement_model()
    matrix = OpSetMatrix({op} | {"Reshape", "Transpose", "Slice", "Gather", "Conv", "Concat", "Split", "Identity"})
    plan = plan_model(model, "fw", "hw", matrix)
    entries = [e for e in plan.entries if e.op == op]
    assert entries
    result = legalize(model, "fw", "hw", matrix, verify=False)
    assert not result.custom_nodes
    for e in entries:
        assert e.remedy != "custom", e
        if e.rules:  # a chain exists (Identity is removed): a rewrite, never a custom layer
            assert e.remedy == "rewrite", e
            continue
        assert e.remedy == "unsupported", e
        assert e.reason.endswith("data movement is never a custom layer: unsupported")
        assert any(line.startswith(f"{e.node} ({op})") for line in result.unresolved)


def test_custom_op_flag_refuses_data_movement(matrix):
    with pytest.raises(BadInput, match="--custom-op Transpose: Transpose only moves data"):
        plan_model(data_movement_model(), "tflite", "gpu", matrix, custom_ops=("Transpose",))


def _relu_move_conv(path, move: onnx.NodeProto, x_shape, y_shape, w_shape):
    """Relu → ``move`` (r → t) → 1x1 Conv of ones, saved to ``path``."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), move, helper.make_node("Conv", ["t", "w"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(np.ones(w_shape, np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _mid_transpose_model(path):
    """Relu → rank-4 Transpose → Conv: MACE's GPU has no Transpose (MACE op_lists.rst: "Only CPU
    and TensorFlow"), nothing removes a rank-4 one, and it is not trailing."""
    return _relu_move_conv(path, helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
                           [1, 3, 4, 5], [1, 2, 5, 4], (2, 3, 1, 1))


def _mid_depth_to_space_model(path):
    """Relu → DepthToSpace → Conv: TNN's RKNPU registers no Reorg converter (the support table
    leaves it blank too), no rule rewrites it, and it is not trailing.  (RKNPU's Transpose, which
    this test used before, has a converter: rknpu_permute_layer.cc:44.)"""
    return _relu_move_conv(path, helper.make_node("DepthToSpace", ["r"], ["t"], blocksize=2),
                           [1, 4, 4, 5], [1, 2, 8, 10], (2, 1, 1, 1))


def test_plan_cli_exits_3_for_unsupported_data_movement(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-m", "converter", "plan", str(_mid_depth_to_space_model(tmp_path / "t.onnx")),
                          "--to", "tnn", "--hw", "rknpu", "--json"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 3, res.stderr
    import json

    plan = json.loads(res.stdout)["plans"][0]
    assert plan["counts"]["unsupported"] == 1 and plan["counts"]["custom"] == 0


def test_port_says_unsupported_not_ok_for_data_movement_without_a_rule(tmp_path):
    from converter.port import port

    # The port stops with the reason instead of shipping a custom DepthToSpace.
    src = _mid_depth_to_space_model(tmp_path / "d.onnx")
    res = port(str(src), to="tnn", hw="rknpu", out=tmp_path / "out")
    assert res.status == "unsupported" and "(DepthToSpace)" in res.reason
    entry = next(e for e in res.report["plan"]["entries"] if e["op"] == "DepthToSpace")
    assert entry["remedy"] == "unsupported" and not (tmp_path / "out" / "custom").exists()
    assert "no fallback (a TNN network runs on the one device" in entry["reason"]
    # MACE's GPU has no Transpose, but its cpu+gpu runtime runs it on the CPU.
    src = _mid_transpose_model(tmp_path / "t.onnx")
    res = port(str(src), to="mace", hw="gpu", out=tmp_path / "mace")
    entry = next(e for e in res.report["plan"]["entries"] if e["op"] == "Transpose")
    assert entry["remedy"] == "fallback" and res.report["plan"]["partitions"]["cpu_partitions"] == 1
    assert "runtime: cpu+gpu" in next(p for p in (tmp_path / "mace").iterdir() if p.suffix == ".yml").read_text()


def test_tflite_concat_then_relu_is_not_fused(tmp_path):
    """The exporter used to fold a Relu into CONCATENATION, whose kernel ignores the activation
    (and refuses it in Prepare): ConvTranspose groups and DenseNet-style concats came out wrong."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 5])],
                              [numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 1, 1))
                                                       .astype(np.float32), "w")])
    model = normalize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    art = targets.get("tflite").export(model, tmp_path, "cpu", ExportOptions(name="m"))
    assert [op["op_name"] for op in litert_ops(art.files[0])].count("RELU") == 1
    feeds = seeded_inputs(model, 0)
    assert max_error(run_onnx(model, feeds), targets.get("tflite").run(art, feeds)) <= 1e-6


def test_mobilenetv2_runs_on_rknpu_as_it_is(zoo_model, matrix, tmp_path):
    """TNN's RKNPU registers Add (math/rknpu_add_layer.cc:32) and Flatten (rknpu_flatten_layer.cc:41)
    converters although its support table leaves both cells blank: the implementation wins, so
    MobileNetV2's residual Adds and its classifier head's Flatten need nothing (before, the Adds
    became Sub + Neg and the Flatten failed the port).  The file runs in TNN's own interpreter
    (X86: the host build has no RKNPU) as the original does in onnxruntime."""
    model = zoo_model("mobilenetv2")
    result = legalize(model, "tnn", "rknpu", matrix)
    assert result.applied == [] and not result.custom_nodes and not result.unresolved
    art = targets.get("tnn").export(result.model, tmp_path / "tnn", "rknpu", ExportOptions(name="m"))
    layer_types = [line.strip('"').split(" ")[0] for line in art.files[0].read_text().splitlines()[4:]]
    assert layer_types.count("Add") == op_histogram(model)["Add"] and "Flatten" in layer_types
    feeds = seeded_inputs(model, 0)
    assert max_error(run_onnx(model, feeds), tnn_run(art, feeds, tmp_path / "tnn_run", device="X86")) <= ATOL


def test_residual_adds_run_as_sub_and_neg_where_add_is_missing(zoo_model, tmp_path):
    """On hardware with Sub and Neg but no Add (an overlay taking Add away from the RKNPU; no
    built-in column lacks it now) MobileNetV2's residual Adds become x - (-y), exactly, instead of
    custom layers; the rewritten file runs in TNN's own interpreter."""
    overlay = tmp_path / "no_add.yaml"
    overlay.write_text("frameworks:\n  tnn:\n    ops:\n      Add:\n        supported: [arm, x86, opencl, metal, "
                       "huawei_npu, cuda, naive, openvino, apple_npu]\n")
    model = zoo_model("mobilenetv2")
    adds = op_histogram(model)["Add"]
    result = legalize(model, "tnn", "rknpu", load_matrix(overlays=[overlay]))
    assert [r for r, _ in result.applied] == ["add_to_sub_neg"] * adds and not result.custom_nodes
    ops = op_histogram(result.model)
    assert "Add" not in ops and ops["Neg"] == adds and ops["Sub"] == op_histogram(model).get("Sub", 0) + adds
    assert result.max_abs_error == 0.0 and not result.unresolved
    art = targets.get("tnn").export(result.model, tmp_path / "tnn", "rknpu", ExportOptions(name="m"))
    layer_types = [line.strip('"').split(" ")[0] for line in art.files[0].read_text().splitlines()[4:]]
    assert "Add" not in layer_types and layer_types.count("Sub") == adds and layer_types.count("Neg") == adds
    feeds = seeded_inputs(model, 0)
    assert max_error(run_onnx(model, feeds), tnn_run(art, feeds, tmp_path / "tnn_run", device="X86")) <= ATOL
