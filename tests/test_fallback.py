"""The fallback remedy: nodes an accelerator cannot run stay in the file for the runtime's fallback
unit (TFLite delegates, MACE cpu+gpu, CoreML compute units), and the plan reports the partitions
the runtime will make; where there is no fallback (TNN devices, Edge TPU, MACE dsp/apu) the reason
says so.  The fallback file runs in LiteRT (the port's own verification, named by its oracle)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from converter.errors import BadInput
from converter.matrix import load_matrix
from converter.legalize.partition import node_macs
from converter.port import port
from converter.legalize.plan import plan_model


def _conv(name, x, y, cin, cout, rng):
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32), f"{name}_w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"{name}_b")
    return helper.make_node("Conv", [x, w.name, b.name], [y], name=name, pads=[1, 1, 1, 1]), [w, b]


def rounding_model(middle: str = "Relu") -> onnx.ModelProto:
    """conv1 → Round → <middle> → Round → conv2 on [1, 3, 16, 16]: Round has no GPU parser in
    LiteRT (and no rewrite), the CPU runs it; ``middle`` sits between two CPU nodes."""
    rng = np.random.default_rng(0)
    c1, i1 = _conv("conv1", "x", "a", 3, 8, rng)
    c2, i2 = _conv("conv2", "r3", "y", 8, 4, rng)
    if middle == "Conv":
        mid, im = _conv("mid", "r1", "r2", 8, 8, rng)
    else:
        mid, im = helper.make_node(middle, ["r1"], ["r2"], name="mid"), []
    nodes = [c1, helper.make_node("Round", ["a"], ["r1"], name="round1"), mid,
             helper.make_node("Round", ["r2"], ["r3"], name="round2"), c2]
    graph = helper.make_graph(nodes, "rounding", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], i1 + im + i2)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def _remedies(plan) -> dict[str, str]:
    return {e.node: e.remedy for e in plan.entries}


def test_gpu_leaves_round_to_the_cpu_and_absorbs_the_elementwise_island(matrix):
    plan = plan_model(rounding_model("Relu"), "tflite", "gpu", matrix)
    assert _remedies(plan) == {"conv1": "supported", "round1": "fallback", "mid": "fallback",
                               "round2": "fallback", "conv2": "supported"}
    assert plan.ok
    mid = next(e for e in plan.entries if e.node == "mid")
    assert mid.verdict == "supported" and mid.reason.endswith("runs on cpu with its neighbours (fewer partitions)")
    round1 = next(e for e in plan.entries if e.node == "round1")
    assert "runs on cpu, the runtime's fallback (google-ai-edge/LiteRT@f674577:tflite/g3doc/performance/gpu.md" \
        in round1.reason
    p = plan.partitions
    assert (p.accelerator_partitions, p.cpu_partitions) == (2, 1)
    assert (p.nodes_on_accelerator, p.nodes) == (2, 5)
    assert p.boundary == ["a", "r3"]
    conv_macs = 8 * 16 * 16 * 3 * 9 + 4 * 16 * 16 * 8 * 9
    assert (p.macs_on_accelerator, p.macs) == (conv_macs, conv_macs + 3 * 8 * 16 * 16)
    assert plan.to_json()["partitions"]["summary"] == (
        "2 gpu partition(s) and 1 on cpu; 40% of nodes and 95% of MACs on gpu; 2 tensor(s) cross units")


def test_a_convolution_between_cpu_nodes_stays_on_the_accelerator(matrix):
    plan = plan_model(rounding_model("Conv"), "tflite", "gpu", matrix)
    assert _remedies(plan)["mid"] == "supported"
    p = plan.partitions
    assert (p.accelerator_partitions, p.cpu_partitions) == (3, 2)
    assert p.boundary == ["a", "r1", "r2", "r3"]


def test_macs_of_conv_and_matmul():
    model = rounding_model("Conv")
    from converter.ir.graph import to_graph

    g = to_graph(model)
    assert node_macs(next(n for n in g.nodes if n.name == "mid")) == 8 * 16 * 16 * 8 * 9
    assert node_macs(next(n for n in g.nodes if n.name == "round1")) == 8 * 16 * 16


def test_no_partitions_when_the_accelerator_runs_everything(matrix):
    plan = plan_model(rounding_model("Relu"), "tflite", "cpu", matrix)
    assert set(_remedies(plan).values()) == {"supported"} and plan.partitions is None
    assert plan.to_json()["partitions"] is None


@pytest.mark.parametrize("fw,hw,why", [
    ("tnn", "huawei_npu", "a TNN network runs on the one device it was created for"),
    ("tflite", "edgetpu", "the Edge TPU compiler maps ops up to the first one it cannot run"),
    ("mace", "dsp", "MACE runs a dsp model whole on the Hexagon"),
])
def test_hardware_without_fallback_says_why(matrix, fw, hw, why):
    assert matrix.fallback(fw, hw).to is None and why in matrix.fallback(fw, hw).reason
    plan = plan_model(rounding_model("Relu"), fw, hw, matrix)
    stuck = [e for e in plan.entries if e.remedy not in ("supported", "rewrite", "postprocess")]
    assert stuck and plan.partitions is None
    for e in stuck:
        assert e.remedy in ("custom", "unsupported") and f"no fallback ({why}" in e.reason, e


@pytest.mark.parametrize("fw,hw,to", [("tflite", "gpu", "cpu"), ("tflite", "nnapi", "cpu"), ("mace", "gpu", "cpu"),
                                      ("coreml", "ane", "cpu"), ("coreml", "gpu", "cpu")])
def test_fallback_units_are_cited(matrix, fw, hw, to):
    fb = matrix.fallback(fw, hw)
    assert fb.to == to and matrix.citation(fb.source).url.startswith("https://github.com/")


def test_port_to_the_gpu_delegate_keeps_round_in_the_file_and_runs_in_litert(tmp_path):
    path = tmp_path / "rounding.onnx"
    onnx.save(rounding_model("Relu"), path)
    result = port(str(path), to="tflite", hw="gpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["plan"]["partitions"]["accelerator_partitions"] == 2
    assert report["ops_after"] == {"Conv": 2, "Round": 2, "Relu": 1}
    target = next(s for s in report["verification"]["stages"] if s["name"] == "target:tflite")
    assert target["status"] == "pass" and max(o["metrics"]["max_abs"] for o in target["outputs"]) < 1e-4
    assert "Partitions on gpu with fallback to cpu" in (tmp_path / "out" / "report.html").read_text()


def test_mace_gpu_with_fallback_nodes_is_a_cpu_gpu_deployment(tmp_path):
    from converter.targets import get
    from converter.targets.base import ExportOptions

    model = onnx.shape_inference.infer_shapes(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    mace = get("mace")
    runtimes = {}
    for extra in ({}, {"fallback_nodes": ("relu",)}):
        art = mace.export(model, tmp_path / str(len(runtimes)), "gpu", ExportOptions(name="m", **extra))
        yml = yaml.safe_load(next(f for f in art.files if str(f).endswith(".yml")).read_text())
        runtimes[bool(extra)] = yml["models"]["m"]["runtime"]
    assert runtimes == {False: "gpu", True: "cpu+gpu"}


def test_check_json_reports_the_fallback(tmp_path):
    from typer.testing import CliRunner

    from converter.cli import app

    path = tmp_path / "rounding.onnx"
    onnx.save(rounding_model("Relu"), path)
    out = CliRunner().invoke(app, ["check", str(path), "--to", "tflite", "--hw", "gpu", "--json"])
    assert out.exit_code == 3
    target = json.loads(out.stdout)["targets"][0]
    assert target["fallback"]["to"] == "cpu" and target["fallback"]["partitions"]["accelerator_partitions"] == 2
    out = CliRunner().invoke(app, ["check", str(path), "--to", "tnn", "--hw", "huawei_npu", "--json"])
    target = json.loads(out.stdout)["targets"][0]
    assert target["fallback"]["to"] is None and "one device" in target["fallback"]["reason"]


def test_a_fallback_to_unknown_hardware_is_refused(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("""
frameworks:
  tflite:
    hardware:
      gpu:
        title: GPU delegate
        source: google-ai-edge/LiteRT@f674577:tflite/delegates/gpu/common/model_builder.cc#L3080-L3287
        properties: {max_outputs: null}
        fallback: {to: dsp, source: "google-ai-edge/LiteRT@f674577:tflite/g3doc/performance/gpu.md#L64-L65"}
""")
    with pytest.raises(BadInput, match="'dsp' is not another hardware of this framework"):
        load_matrix(overlays=[overlay])
