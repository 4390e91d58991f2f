"""GPU files judged for what can be checked here, and named for exactly that.

No GPU runtime exists on this host (a MACE OpenCL build on pocl fails: MACE's kernels need
cl_khr_fp16).  A MACE ``runtime: gpu`` NetDef and a TNN OpenCL file hold the same graph as their
CPU twins, so the real CPU runtimes run that graph: ``mace_run`` on a copy of the .pb whose
``runtime_type`` alone says CPU (the user's file untouched), ``tnn_run`` on the file as it is (a
.tnnproto names no device).  Every verdict says "... on the GPU file's graph; GPU kernels not run
here", and the tolerance is the GPU's precision: TNN's OpenCL default computes in half, MACE's
kernels in each op's ``T`` (float in edgeconv's files).  The zoo (test sizes) passes this way on
``mace gpu`` and ``tnn opencl`` (``ZOO_PASSES``); docs/targets.md states the count.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.demo import zoo
from converter.frontend.normalize import normalize
from converter.port import port
from converter.targets.mace.runtime import GPU_ORACLE, RT_CPU, RT_GPU, cpu_twin
from converter.targets.oracles import resolve
from converter.targets.base import FP16_TOLERANCE, ExportOptions
from converter.targets.mace import TARGET as MACE
from converter.targets.mace._generated import mace_pb2
from converter.targets.tnn import TARGET as TNN
from rank_runtimes import MACE_RUN, TNN_RUN, TNN_TEST, mace_runtime, need
from test_runtimes import conv_model, save

TNN_OPENCL_ORACLE = "TNN x86 runtime (tnn_run) on the OpenCL file's graph; OpenCL kernels not run here"
#: Zoo models (converter/zoo.py NAMES, test size) whose port passes in the real CPU runtime on the
#: GPU file's graph, per (framework, hardware).
ZOO_PASSES = {("mace", "gpu"): 7, ("tnn", "opencl"): 7}


def _runtime_type(pb: bytes) -> list[int]:
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(pb)
    return [a.i for net in multi.net_def for a in net.arg if a.name == "runtime_type"]


def layer_scale_model() -> onnx.ModelProto:
    """Conv, then Mul by a [1, 1, 1, W] constant: MACE's OpenCL Eltwise broadcasts only
    [N, 1, 1, C] and [N, H, W, 1] operands, so the GPU file writes this one out in full (the one
    place edgeconv's GPU and CPU MACE files differ)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Mul", ["c", "s"], ["y"], name="scale")]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((1, 1, 1, 6)).astype(np.float32), "s")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])], inits)
    return normalize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_mace_gpu_port_runs_its_own_graph_in_mace_run_and_says_so(tmp_path):
    need(MACE_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="mace", hw="gpu", out=tmp_path / "o", runtimes={"mace": str(MACE_RUN)})
    assert (result.status, result.oracle) == ("ok", GPU_ORACLE), result.reason
    verify = json.loads((tmp_path / "o" / "verify" / "verify.json").read_text())
    stage = next(s for s in verify["stages"] if s["name"] == "target:mace")
    assert stage["oracle"] == {"name": GPU_ORACLE, "kind": "runtime"} and stage["status"] == "pass"
    assert stage["outputs"][0]["metrics"]["max_abs"] <= 1e-5
    # the file edgeconv wrote still says GPU; the report records the precision it computes in
    assert _runtime_type((tmp_path / "o" / "m.pb").read_bytes()) == [RT_GPU]
    assert result.report["artifact"]["meta"]["compute_precision"] == "fp32"
    assert resolve("mace", {"mace": str(MACE_RUN)}, "dsp") is None  # Hexagon NN nodes: not a CPU graph


def test_cpu_twin_switches_only_the_runtime_type(tmp_path):
    art = MACE.export(layer_scale_model(), tmp_path / "gpu", "gpu", ExportOptions(name="m"))
    pb = art.out_dir / "m.pb"
    before = pb.read_bytes()
    (tmp_path / "work").mkdir()
    twin = cpu_twin(pb, tmp_path / "work")
    assert twin != pb and pb.read_bytes() == before and _runtime_type(twin.read_bytes()) == [RT_CPU]
    back = mace_pb2.MultiNetDef()
    back.ParseFromString(twin.read_bytes())
    next(a for a in back.net_def[0].arg if a.name == "runtime_type").i = RT_GPU
    assert back.SerializeToString(deterministic=True) == before  # nothing else differs
    cpu = MACE.export(layer_scale_model(), tmp_path / "cpu", "cpu", ExportOptions(name="m"))
    assert cpu_twin(cpu.out_dir / "m.pb", tmp_path / "work") == cpu.out_dir / "m.pb"  # a CPU file runs as it is
    # the GPU file's graph is its own: the broadcast operand is written out in full
    sizes = lambda a: sorted(t.data_size for t in _net(a).tensors)  # noqa: E731
    assert sizes(art) != sizes(cpu) and 4 * 5 * 6 in sizes(art)


def _net(artifact):
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString((artifact.out_dir / "m.pb").read_bytes())
    return multi.net_def[0]


def test_mace_run_computes_the_gpu_files_weights(tmp_path):
    """The GPU file's own graph runs (not a CPU re-export): its written-out broadcast operand
    matches onnxruntime, and a changed weight in its .data shows up in mace_run's outputs."""
    need(MACE_RUN)
    model = layer_scale_model()
    art = MACE.export(model, tmp_path / "gpu", "gpu", ExportOptions(name="m"))
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 5, 6)).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert mace_runtime().oracle_name("gpu") == GPU_ORACLE
    got = mace_runtime().run(art, feeds)["y"]
    assert float(np.max(np.abs(got - ref))) <= 1e-5
    data = bytearray((art.out_dir / "m.data").read_bytes())
    scale = next(t for t in _net(art).tensors if t.data_size == 4 * 5 * 6)
    data[scale.offset:scale.offset + 4] = np.float32(100.0).tobytes()
    (art.out_dir / "m.data").write_bytes(bytes(data))
    changed = mace_runtime().run(art, feeds)["y"]
    assert float(np.max(np.abs(changed - ref))) > 1.0


def test_tnn_opencl_port_is_judged_at_half_precision_and_says_what_ran(tmp_path):
    need(TNN_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="tnn", hw="opencl", out=tmp_path / "o", runtimes={"tnn": str(TNN_RUN)})
    assert (result.status, result.oracle) == ("ok", TNN_OPENCL_ORACLE), result.reason
    stage = next(s for s in result.report["verification"]["stages"] if s["name"] == "target:tnn")
    assert stage["outputs"][0]["tolerance"] == FP16_TOLERANCE  # OpenCL's default precision is half
    assert stage["outputs"][0]["metrics"]["max_abs"] <= 1e-5  # the x86 kernels compute in float
    assert result.report["artifact"]["meta"]["compute_precision"] == "fp16"
    arm = port(path, to="tnn", hw="arm", out=tmp_path / "a", runtimes={"tnn": str(TNN_RUN)})
    assert arm.oracle == "TNN x86 runtime (tnn_run)"
    assert arm.report["verification"]["stages"][-1]["outputs"][0]["tolerance"] == {"atol": 1e-4, "rtol": 1e-3}
    # the same bytes: a .tnnproto names no device
    assert [(tmp_path / "o" / f).read_bytes() for f in ("m.tnnproto", "m.tnnmodel")] == \
        [(tmp_path / "a" / f).read_bytes() for f in ("m.tnnproto", "m.tnnmodel")]
    need(TNN_TEST)
    assert resolve("tnn", {"tnn": str(TNN_TEST)}).oracle_name("rknpu") == (
        "TNN x86 runtime (TNNTest, 6-decimal text output) on the RKNPU file's graph; RKNPU kernels not run here")


def test_tnn_opencl_half_tolerance_still_fails_a_wrong_file(tmp_path):
    """fp16 tolerances (4e-3) are not a pass for anything: a weight off by 0.5 fails in tnn_run."""
    need(TNN_RUN)
    from converter.targets.oracles import bind
    from converter.verify.pipeline import verify_port
    from converter.verify.stages import Tolerances
    from converter.verify.metrics import Tolerance

    model = normalize(conv_model())
    art = TNN.export(model, tmp_path / "o", "opencl")
    weights = bytearray(art.files[1].read_bytes())
    w = np.frombuffer(bytes(weights), np.uint8)
    first = numpy_helper.to_array(model.graph.initializer[0]).reshape(-1)[0].astype(np.float32).tobytes()
    at = bytes(w).index(first)
    weights[at:at + 4] = (np.frombuffer(first, np.float32) + np.float32(0.5)).tobytes()
    art.files[1].write_bytes(bytes(weights))
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
    tol = Tolerances(default=Tolerance(**FP16_TOLERANCE))
    report = verify_port(model, model, model, target=bind(TNN, resolve("tnn", {"tnn": str(TNN_RUN)})),
                         artifact=art, inputs=[feeds], target_tolerances=tol)
    assert not report.ok and report.stages[-1].status == "fail"
    assert report.stages[-1].oracle["name"] == TNN_OPENCL_ORACLE


@pytest.mark.parametrize("fw, hw", sorted(ZOO_PASSES))
def test_zoo_gpu_ports_pass_on_their_own_graph(fw, hw, tmp_path, zoo_onnx_path):
    runtime = {"mace": MACE_RUN, "tnn": TNN_RUN}[fw]
    need(runtime)
    passed, failed = 0, {}
    for name in zoo.NAMES:
        result = port(str(zoo_onnx_path(name)), to=fw, hw=hw, out=tmp_path / name, runtimes={fw: str(runtime)})
        assert result.oracle == (GPU_ORACLE if fw == "mace" else TNN_OPENCL_ORACLE), (name, result.oracle)
        if result.status == "ok":
            passed += 1
        else:
            failed[name] = (result.status, result.reason[:200])
    assert passed == ZOO_PASSES[(fw, hw)], failed
