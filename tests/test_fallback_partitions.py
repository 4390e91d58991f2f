"""The fallback remedy's partition report (converter/partition.py) on small hand-built models:
which nodes fall back to the CPU, the partitions, node and MAC shares, boundary tensors, and the
hardware where the remedy is unavailable."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from converter.matrix import load_matrix
from converter.partition import FALLBACK_UNITS, NO_FALLBACK, fallback_report, node_macs
from converter.graph import to_graph


class _Matrix:
    """The real matrix, except that the accelerator lacks ``missing`` op types."""

    def __init__(self, missing):
        self.real, self.missing = load_matrix(), set(missing)

    def check_node(self, node, framework, hw):
        verdict = self.real.check_node(node, framework, hw)
        if hw != "cpu" and node.op in self.missing:
            return dataclasses.replace(verdict, status="unsupported")
        return verdict


def conv_chain_model(middle="Sigmoid"):
    """conv(3->8, 3x3) -> Sigmoid -> conv(8->8, 3x3) -> Relu -> MatMul [1,8,6,6] x [6,4]."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("m", (4, 4)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv_a"),
             helper.make_node(middle, ["a"], ["b"], name="mid"),
             helper.make_node("Conv", ["b", "w2"], ["c"], name="conv_c"),
             helper.make_node("Relu", ["c"], ["d"], name="relu"),
             helper.make_node("MatMul", ["d", "m"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_macs_of_conv_and_matmul():
    nodes = {n.name: n for n in to_graph(conv_chain_model()).nodes}
    assert node_macs(nodes["conv_a"]) == 8 * 6 * 6 * 3 * 3 * 3       # 7776
    assert node_macs(nodes["conv_c"]) == 8 * 4 * 4 * 8 * 3 * 3       # 9216
    assert node_macs(nodes["matmul"]) == 8 * 4 * 4 * 4                # 512
    assert node_macs(nodes["relu"]) == 0


def test_one_node_falling_back_splits_the_model_in_three():
    report = fallback_report(conv_chain_model(), "tflite", "gpu", _Matrix({"Sigmoid"}))
    assert report.available and report.fallback_unit == "cpu"
    assert report.fallback_nodes == ["mid"] and report.unplaced_nodes == []
    assert [(p.unit, p.nodes) for p in report.partitions] == [
        ("gpu", ["conv_a"]), ("cpu", ["mid"]), ("gpu", ["conv_c", "relu", "matmul"])]
    assert report.node_share == 4 / 5
    assert report.mac_share == 1.0  # Erf does no multiply-accumulates
    assert report.boundary == {"a": ("gpu", "cpu", [1, 8, 6, 6]), "b": ("cpu", "gpu", [1, 8, 6, 6])}
    assert "1 node(s) fall back to the cpu: 3 partition(s), 80% of nodes and 100% of MACs" in report.summary()


def test_mac_share_counts_what_leaves_the_accelerator():
    report = fallback_report(conv_chain_model(), "tflite", "nnapi", _Matrix({"Conv"}))
    assert report.fallback_nodes == ["conv_a", "conv_c"]
    assert len(report.partitions) == 4  # cpu | gpu | cpu | gpu
    assert abs(report.mac_share - 512 / (7776 + 9216 + 512)) < 1e-12
    assert report.node_share == 3 / 5


def test_a_node_the_cpu_lacks_too_is_not_placed():
    """Erf: neither TFLite's GPU delegate nor its CPU kernels (real matrix): another remedy's job."""
    report = fallback_report(conv_chain_model("Erf"), "tflite", "gpu", load_matrix())
    assert report.fallback_nodes == [] and report.unplaced_nodes == ["mid"]
    assert [(p.unit, p.nodes) for p in report.partitions] == [("gpu", ["conv_a"]), ("gpu", ["conv_c", "relu", "matmul"])]


def test_nothing_to_fall_back_on_a_fully_supported_accelerator():
    report = fallback_report(conv_chain_model(), "coreml", "ane", _Matrix(set()))
    assert report.available and not report.needed
    assert len(report.partitions) == 1 and report.node_share == 1.0


def test_unavailable_where_the_runtime_cannot_fall_back():
    for fw, hw in NO_FALLBACK:
        report = fallback_report(conv_chain_model(), fw, hw, _Matrix({"Sigmoid"}))
        assert not report.available and report.reason
        assert "unavailable" in report.summary()
    assert fallback_report(conv_chain_model(), "tflite", "cpu", _Matrix(set())) is None
    assert set(FALLBACK_UNITS) == {"tflite", "mace", "coreml"}


def test_check_shows_the_fallback(tmp_path):
    """`edgeconv check --json` carries the partition picture on an accelerator, and the table a line."""
    import json
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(conv_chain_model("Erf"), path)
    out = subprocess.run([sys.executable, "-m", "converter", "check", str(path), "--to", "tflite", "--hw", "gpu",
                          "--json"], capture_output=True, text=True, timeout=120)
    target = json.loads(out.stdout)["targets"][0]
    assert target["fallback"]["available"] is True
    assert target["fallback"]["unplaced_nodes"] == [target["verdicts"][1]["node"]]
    assert len(target["fallback"]["partitions"]) == 2
    out = subprocess.run([sys.executable, "-m", "converter", "check", str(path), "--to", "tnn", "--hw", "rknpu"],
                         capture_output=True, text=True, timeout=120)
    assert "fallback: fallback to the CPU unavailable on tnn/rknpu: TNN builds the whole network" in " ".join(out.stdout.split())


def test_report_page_section():
    from converter.report.port_page import _fallback

    report = fallback_report(conv_chain_model(), "tflite", "gpu", _Matrix({"Sigmoid"}))
    page = _fallback(report.to_dict(), "gpu")
    assert "1 node(s) would run on the cpu: 3 partition(s), 80% of nodes and 100% of MACs on the gpu" in page
    assert page.count("<tr>") == 1 + 3 + 1 + 2  # partitions table, boundary table (a, b)
    unavailable = fallback_report(conv_chain_model(), "tflite", "edgetpu", _Matrix({"Sigmoid"}))
    assert "Unavailable: the Edge TPU compiler maps one leading subgraph" in _fallback(unavailable.to_dict(), "edgetpu")


def test_plan_reports_the_fallback_for_what_no_rule_rewrites(tmp_path):
    """After planning, the nodes the plan cannot make run on the accelerator (remedy custom,
    postprocess or unsupported) are the fallback candidates; rewritten ones stay."""
    from converter.partition import fallback_for_plan
    from converter.plan import Plan, PlanEntry

    model = conv_chain_model()
    names = [n.name for n in to_graph(model).nodes]
    plan = Plan("tflite", "gpu", [PlanEntry(n, "?", "supported", "supported", [], "") for n in names])
    plan.entries[1] = PlanEntry("mid", "Sigmoid", "unsupported", "custom", [], "no rule")
    report = fallback_for_plan(model, plan, load_matrix())
    assert report.fallback_nodes == ["mid"]  # TFLite's CPU kernels run Sigmoid (LOGISTIC)
    assert len(report.partitions) == 3 and report.node_share == 4 / 5
    plan.entries[1] = PlanEntry("mid", "Sigmoid", "unsupported", "rewrite", ["x"], "")
    assert not fallback_for_plan(model, plan, load_matrix()).needed
