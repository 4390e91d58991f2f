"""Real runtimes as oracles (converter/runtimes): selection by flag, environment and manifest;
every verdict names its oracle; a reader that cannot run a file leaves the port `unverified`
(exit 8), a real runtime that refuses it fails it; custom kernels nobody wrote are
`needs_custom` (exit 7); replay paths name the final directory; the float32 noise floor.

The TNN and MACE cases run the frameworks' own interpreters from ../shared/runtimes (CI has
them); they skip, naming the path, only where that directory is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.errors import BadInput, Unsupported
from converter.port import port
from converter.runtimes import READER, RUNTIME, RuntimeRefused
from converter.targets.oracles import bind, builtin_oracle, oracle_of, parse_runtime_flags, pluggable, resolve
from rank_runtimes import MACE_RUN, TNN_RUN, TNN_TEST, need

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(5)


def conv_model(pad_mode: str | None = None, cin=3, cout=4, hw=8) -> onnx.ModelProto:
    """Conv (+ Relu, or an edge/reflect Pad) with seeded weights."""
    w = RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    inits = [numpy_helper.from_array(w, "w")]
    if pad_mode:
        nodes.append(helper.make_node("Pad", ["c", "p"], ["y"], mode=pad_mode, name="pad"))
        inits.append(numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "p"))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
                              [onnx.ValueInfoProto(name="y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.value_info[:]
    return model


def save(model, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return str(path)


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "converter", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


# -- selection ---------------------------------------------------------------------------------


def test_runtime_flags_env_and_bad_paths(tmp_path, monkeypatch):
    assert parse_runtime_flags(["tnn=/a/b", "MACE= c "]) == {"tnn": "/a/b", "mace": "c"}
    for bad in ("tnn", "tnn=", "tflite=/x"):
        with pytest.raises(BadInput, match="--runtime"):
            parse_runtime_flags([bad])
    for env in pluggable().values():
        monkeypatch.delenv(env, raising=False)
    assert resolve("tnn") is None and resolve("tflite") is None
    monkeypatch.setenv("EDGECONV_TNN_RUNTIME", str(tmp_path / "missing"))
    with pytest.raises(BadInput, match="no such file"):
        resolve("tnn")
    not_exec = tmp_path / "tnn_run"
    not_exec.write_text("")
    with pytest.raises(BadInput, match="not executable"):
        resolve("tnn", {"tnn": str(not_exec)})  # the flag wins over the environment
    res = cli("port", save(conv_model(), tmp_path / "m.onnx"), "--to", "tnn", "-o", str(tmp_path / "o"),
              "--runtime", f"mace={tmp_path / 'nowhere'}")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no such file" in res.stderr
    assert not (tmp_path / "o").exists()


def test_tnn_runtime_path_forms(tmp_path):
    need(TNN_RUN)
    assert resolve("tnn", {"tnn": str(TNN_RUN)}).path == TNN_RUN
    assert resolve("tnn", {"tnn": str(TNN_RUN.parent.parent)}).path == TNN_RUN  # a build dir
    assert type(resolve("tnn", {"tnn": str(TNN_TEST)})).__name__ == "TnnTest"


# -- oracles named -----------------------------------------------------------------------------


def test_builtin_oracles_are_named_with_versions():
    from importlib.metadata import version

    assert builtin_oracle("litert").name == f"LiteRT {version('ai-edge-litert')}"
    assert builtin_oracle("litert").kind == RUNTIME
    tnn = builtin_oracle("tnn-reader+onnxruntime")
    assert tnn.name == f"edgeconv TNN reader (onnxruntime {version('onnxruntime')})" and tnn.kind == READER
    assert builtin_oracle("mil-numpy").name == "CoreML MIL executor (no device)"


def test_port_tnn_with_real_runtime_names_it_everywhere(tmp_path):
    need(TNN_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    res = cli("port", path, "--to", "tnn", "-o", str(tmp_path / "o"), "--runtime", f"tnn={TNN_RUN}")
    assert res.returncode == 0, res.stderr + res.stdout
    oracle = "TNN x86 runtime (tnn_run)"
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    verify = json.loads((tmp_path / "o" / "verify" / "verify.json").read_text())
    stage = next(s for s in verify["stages"] if s["name"] == "target:tnn")
    assert report["oracle"] == verify["target_oracle"] == stage["oracle"]["name"] == oracle
    assert stage["oracle"]["kind"] == "runtime" and stage["status"] == "pass"
    assert verify["reference_oracle"]["name"].startswith("onnxruntime ")
    assert f"judged by │ {oracle}" in res.stdout.replace("  ", " ").replace("  ", " ") or oracle in res.stdout
    assert f"target:tnn ({oracle}) match the original" in res.stdout
    assert f"target stage judged by <b>{oracle}</b> against onnxruntime " in (tmp_path / "o" / "report.html").read_text()


def test_port_mace_runtime_from_the_environment(tmp_path):
    need(MACE_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="mace", hw="cpu", out=tmp_path / "o")
    assert result.oracle.startswith("edgeconv MACE reader (onnxruntime ")
    os.environ["EDGECONV_MACE_RUNTIME"] = str(MACE_RUN)
    try:
        result = port(path, to="mace", hw="cpu", out=tmp_path / "o2")
    finally:
        del os.environ["EDGECONV_MACE_RUNTIME"]
    assert result.status == "ok" and result.oracle == "MACE CPU runtime (mace_run)"
    errs = [o["metrics"]["max_abs"] for s in result.report["verification"]["stages"] if s["name"] == "target:mace"
            for o in s["outputs"]]
    assert errs and max(errs) <= 1e-5


# -- unverified / refused / needs_custom ------------------------------------------------------


def test_reader_that_cannot_run_the_file_leaves_the_port_unverified(tmp_path, monkeypatch):
    """A TNN reader failure (the issue's ViT: the reader's shape inference, not the file) is exit
    8, never verify_failed; with the real runtime the same file is judged, and passes."""
    import converter.targets.tnn.reader_onnx as reader

    def broken(*_args, **_kwargs):
        raise RuntimeError("[ShapeInferenceError] Incompatible dimensions for matrix multiplication")

    monkeypatch.setattr(reader, "load_as_onnx", broken)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="tnn", hw="arm", out=tmp_path / "o")
    assert (result.status, result.exit_code) == ("unverified", 8)
    assert result.reason.startswith("target stage unverified: reader could not run it (edgeconv TNN reader")
    assert "Incompatible dimensions" in result.reason
    stages = {s["name"]: s["status"] for s in result.report["verification"]["stages"]}
    assert stages == {"normalized": "pass", "legalized": "pass", "target:tnn": "unverified"}
    assert (tmp_path / "o" / "m.tnnproto").exists()
    need(TNN_RUN)
    result = port(path, to="tnn", hw="arm", out=tmp_path / "o2", runtimes={"tnn": str(TNN_RUN)})
    assert (result.status, result.oracle) == ("ok", "TNN x86 runtime (tnn_run)")


def test_real_runtime_refusing_the_file_fails_the_port(tmp_path):
    """The issue's false success: an edge Pad written as TNN pad type 2 passes the reader, and
    TNN's x86 kernel refuses it.  Judged by the runtime, that is a failed target stage."""
    need(TNN_RUN)
    from converter.targets import get
    from converter.verify.pipeline import verify_port

    from converter.frontend.normalize import normalize

    model = normalize(conv_model("edge"))
    tnn = get("tnn")
    with pytest.raises(Unsupported, match="Pad mode 'edge'"):  # the exporter no longer writes it ...
        tnn.export(model, tmp_path / "raw", "arm")
    # ... so write what it wrote before: a reflect pad whose type token says 2 (edge)
    reflect = onnx.ModelProto()
    reflect.CopyFrom(model)
    next(a for n in reflect.graph.node if n.op_type == "Pad" for a in n.attribute if a.name == "mode").s = b"reflect"
    art = tnn.export(reflect, tmp_path / "raw", "arm")
    proto = art.files[0].read_text()
    pad_line = next(line for line in proto.splitlines() if line.startswith('"Pad'))
    tokens = pad_line.split()
    assert tokens[-3] == "1"  # ... pad_c_b pad_c_e type value ,"
    tokens[-3] = "2"
    art.files[0].write_text(proto.replace(pad_line, " ".join(tokens)))
    feeds = {"x": RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
    with pytest.raises(RuntimeRefused, match=r"x86_pad_layer_acc.cc.*type:2"):
        bind(tnn, resolve("tnn", {"tnn": str(TNN_RUN)})).run(art, feeds)
    report = verify_port(model, model, model, target=bind(tnn, resolve("tnn", {"tnn": str(TNN_RUN)})), artifact=art,
                         inputs=[feeds])
    stage = report.stages[-1]
    assert not report.ok and stage.status == "error" and "layer param is not supported: type:2" in stage.reason
    assert oracle_of(bind(tnn, resolve("tnn", {"tnn": str(TNN_RUN)})), art).name == "TNN x86 runtime (tnn_run)"
    # the reader alone says the file is fine: exactly the false success the runtime catches
    assert verify_port(model, model, model, target=tnn, artifact=art, inputs=[feeds]).ok


def test_edge_pad_ports_to_tnn_and_mace_as_slices_judged_by_the_runtimes(tmp_path):
    need(TNN_RUN)
    need(MACE_RUN)
    path = save(conv_model("edge"), tmp_path / "m.onnx")
    for fw, hw, tool in (("tnn", "arm", TNN_RUN), ("tnn", "naive", TNN_RUN), ("mace", "cpu", MACE_RUN)):
        result = port(path, to=fw, hw=hw, out=tmp_path / f"{fw}-{hw}", runtimes={fw: str(tool)})
        assert result.status == "ok", (fw, hw, result.reason)
        assert [a["rule"] for a in result.report["applied_rules"]] == ["edge_pad_to_slice_concat"]
        stage = result.report["verification"]["stages"][-1]
        assert stage["oracle"]["kind"] == "runtime" and stage["status"] == "pass"
        assert max(o["metrics"]["max_abs"] for o in stage["outputs"]) <= 1e-5
    assert result.oracle == "MACE CPU runtime (mace_run)"


def test_vit_encoder_on_tnn_is_judged_by_tnn_runtime(tmp_path):
    """The issue's ViT-style encoder (batched rank-3/4 MatMuls) on TNN, judged by TNN's runtime."""
    need(TNN_RUN)
    from accelerator_models import vit

    path = save(vit(), tmp_path / "vit.onnx")
    result = port(path, to="tnn", hw="x86", out=tmp_path / "o", runtimes={"tnn": str(TNN_RUN)})
    assert (result.status, result.oracle) == ("ok", "TNN x86 runtime (tnn_run)"), result.reason
    stage = result.report["verification"]["stages"][-1]
    assert stage["name"] == "target:tnn" and max(o["metrics"]["max_abs"] for o in stage["outputs"]) <= 1e-4


@pytest.mark.parametrize("a_shape, b_shape", [((2, 4, 6, 5), (4, 5, 3)), ((4, 6, 5), (2, 4, 5, 3)),
                                              ((2, 1, 6, 5), (1, 4, 5, 3))])
def test_broadcast_batched_matmul_runs_in_tnn(a_shape, b_shape, tmp_path):
    """TNN's x86 MatMul indexes an operand batch as `bc < batch ? bc : 0`: the exporter expands
    operands whose batch is neither 1 nor the output's (it computed wrong numbers before)."""
    need(TNN_RUN)
    from converter.targets import get
    from rank_runtimes import tnn_run

    a, b = (RNG.standard_normal(s).astype(np.float32) for s in (a_shape, b_shape))
    for const in (False, True):
        inits = [numpy_helper.from_array(b, "b")] if const else []
        ins = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)] + (
            [] if const else [helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)])
        graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g", ins,
                                  [onnx.ValueInfoProto(name="y")], inits)
        model = onnx.shape_inference.infer_shapes(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
        art = get("tnn").export(model, tmp_path / f"m{const}", "x86")
        feeds = {"a": a} if const else {"a": a, "b": b}
        for device in ("X86", "NAIVE"):
            got = tnn_run(art, feeds, device=device)["y"]
            assert np.max(np.abs(got - np.matmul(a, b))) <= 1e-5, (device, const)


def test_real_runtime_localizes_a_wrong_weight_in_the_file(tmp_path):
    """A weight perturbed in the written .tnnmodel: the runtime's outputs fail (far above the
    noise floor), and the runtime's own intermediates (every blob exposed as an output) name
    the layer."""
    need(TNN_RUN)
    from converter.frontend.normalize import normalize
    from converter.targets import get
    from converter.verify.pipeline import verify_port

    model = normalize(conv_model())
    tnn = get("tnn")
    art = tnn.export(model, tmp_path / "o", "x86")
    weights = art.files[1].read_bytes()
    w0 = numpy_helper.to_array(model.graph.initializer[0]).reshape(-1)[:4].astype("<f4").tobytes()
    at = weights.index(w0)
    value = np.frombuffer(weights[at:at + 4], "<f4")[0]
    art.files[1].write_bytes(weights[:at] + np.float32(value * 1.05 + 0.1).tobytes() + weights[at + 4:])
    bound = bind(tnn, resolve("tnn", {"tnn": str(TNN_RUN)}))
    feeds = {"x": RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
    report = verify_port(model, model, model, target=bound, artifact=art, inputs=[feeds])
    stage = report.stages[-1]
    assert stage.status == "fail" and stage.outputs[0].judged_by == "atol/rtol"
    assert "beyond 16x the float32 noise floor" in stage.reason
    first = stage.layers.first
    # TNN fuses the ReLU into the convolution: the runtime's ReLU blob is the first tensor off,
    # and it computes the convolution too
    assert (first.node, first.candidate_op, first.also_computes) == ("relu_0", "ReLU", ["conv_0"])
    assert stage.layers.target == "tnn" and first.rmse > 1e-3


# -- statuses in tables, batch ------------------------------------------------------------------


def test_port_to_all_shows_the_oracle_for_every_row(tmp_path):
    need(TNN_RUN)
    need(MACE_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    # --to all --hw all is the same loop over more rows (the zoo run in the README shows it);
    # here every framework's CPU, in one run, as the table a user reads.
    res = cli("port", path, "--to", "all", "-o", str(tmp_path / "o"),
              "--runtime", f"tnn={TNN_RUN}", "--runtime", f"mace={MACE_RUN}")
    assert res.returncode == 0, res.stderr
    rows = {tuple(c.strip() for c in line.split("│")[1:4]): line for line in res.stdout.splitlines()
            if line.startswith("│ ") and "framework" not in line}
    judged = {(fw, hw): line.split("│")[4].strip() for (fw, hw, _), line in rows.items()}
    assert judged[("tnn", "arm")] == "TNN x86 runtime (tnn_run)"
    assert judged[("mace", "cpu")] == "MACE CPU runtime (mace_run)"
    assert judged[("tflite", "cpu")].startswith("LiteRT ")
    assert judged[("coreml", "cpu")] == "CoreML MIL executor (no device)" or judged[("coreml", "cpu")].startswith("CoreML runtime")
    assert "judged by" in res.stdout and len(judged) == 4


def test_batch_junit_marks_needs_custom_as_failing_and_names_oracles(tmp_path):
    save(conv_model(), tmp_path / "m.onnx")
    overlay = tmp_path / "no-relu.yaml"
    overlay.write_text("frameworks:\n  tflite:\n    ops:\n      Relu:\n        supported: []\n")
    manifest = tmp_path / "release.yaml"
    manifest.write_text("targets:\n  - {to: tflite, hw: cpu}\nmodels:\n  - path: m.onnx\n    custom_ops: [Relu]\n")
    res = cli("batch", str(manifest), "-o", str(tmp_path / "b"))
    assert res.returncode == 6, res.stderr
    junit = (tmp_path / "b" / "junit.xml").read_text()
    assert 'failures="1"' in junit and 'type="needs_custom"' in junit and "needs custom kernels: 1 op" in junit
    assert 'name="oracle" value="LiteRT ' in junit
    summary = json.loads((tmp_path / "b" / "batch-summary.json").read_text())
    assert [j["status"] for j in summary["jobs"]] == ["needs_custom"] and summary["jobs"][0]["exit_code"] == 7


def test_manifest_runtimes_key_is_resolved_and_checked(tmp_path):
    from converter.batch.manifest import load_manifest

    save(conv_model(), tmp_path / "m.onnx")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tnn_run").write_text("")
    manifest = tmp_path / "r.yaml"
    manifest.write_text("runtimes: {tnn: bin/tnn_run}\ntargets: [{to: tnn, hw: arm}]\nmodels: [{path: m.onnx}]\n")
    job = load_manifest(manifest).jobs[0]
    assert job.entry["runtimes"] == {"tnn": str((tmp_path / "bin" / "tnn_run").resolve())}
    manifest.write_text("runtimes: {tflite: x}\ntargets: [{to: tnn, hw: arm}]\nmodels: [{path: m.onnx}]\n")
    with pytest.raises(BadInput, match=r"r.yaml:1: runtimes.tflite: no pluggable runtime"):
        load_manifest(manifest)


# -- replay paths -----------------------------------------------------------------------------


def test_replay_paths_name_the_final_directory(tmp_path):
    path = save(conv_model(), tmp_path / "m.onnx")
    profile = tmp_path / "strict.yaml"
    profile.write_text("atol: 0\nrtol: 0\nnoise_multiple: 0\n")
    out = tmp_path / "out"
    res = cli("port", path, "--to", "tflite", "-o", str(out), "--tolerances", str(profile))
    assert res.returncode == 4, res.stderr
    verify = json.loads((out / "verify" / "verify.json").read_text())
    report = (out / "report.json").read_text()
    script = (out / "verify" / "reproduce.sh").read_text()
    for text in (json.dumps(verify), report, script, res.stdout):
        assert ".edgeconv-" not in text
    assert verify["replay"]["inputs"] == str((out / "verify" / "verify-inputs.npz").resolve())
    assert verify["replay"]["script"] == str((out / "verify" / "reproduce.sh").resolve())
    assert str((out / "normalized.onnx").resolve()) in script and Path(verify["replay"]["inputs"]).is_file()


# -- the noise floor ------------------------------------------------------------------------------


def head_model(scale=1000.0) -> onnx.ModelProto:
    """A box-regression-like head: offsets are the difference of two large-coordinate
    activations (|a|, |b| ~ 1e4, |a - b| ~ 1): float32 rounding alone moves them by ~1e-2."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 32, 3, 3)) * scale).astype(np.float32)
    w2 = (w + rng.standard_normal(w.shape) * scale * 1e-4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1], name="coords"),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1], name="anchors"),
             helper.make_node("Sub", ["a", "b"], ["y"], name="offsets")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _float64_runner(model):
    """The head computed exactly (float64, then rounded once): a faithful, different runtime."""
    import torch

    w, w2 = (torch.tensor(numpy_helper.to_array(t), dtype=torch.float64) for t in model.graph.initializer)

    def run(inputs):
        x = torch.tensor(inputs["x"], dtype=torch.float64)
        y = torch.nn.functional.conv2d(x, w, padding=1) - torch.nn.functional.conv2d(x, w2, padding=1)
        return {"y": y.numpy().astype(np.float32)}

    return run


def test_noise_floor_passes_a_faithful_runtime_and_catches_a_wrong_weight():
    from converter.verify import Stage, verify_stages
    from converter.verify.noise import estimate
    from converter.runtimes.onnxruntime import onnx_runner
    from converter.verify.stages import Tolerances

    model = head_model()
    feeds = [{"x": np.random.default_rng(s).uniform(-1, 1, (1, 32, 8, 8)).astype(np.float32)} for s in (0, 1)]
    report = verify_stages(model, [Stage("exact", _float64_runner(model))], feeds)
    out = report.stages[0].outputs[0]
    # beyond atol/rtol (float32 rounding of ~1e4 activations), within 16x the noise floor
    assert out.metrics.mismatched > 0 and 1e-3 < out.metrics.max_abs < 0.1
    assert out.passed and out.judged_by == "noise floor" and report.ok
    floor = out.noise_floor
    assert 1e-3 < floor.max_abs < 0.1 and out.metrics.max_abs <= 16 * floor.max_abs
    assert estimate(model, feeds, [onnx_runner(model)(f) for f in feeds])["y"] == floor  # seeded: repeatable
    d = report.to_dict()["stages"][0]["outputs"][0]
    assert d["judged_by"] == "noise floor" and d["noise_multiple"] == 16 and d["noise_floor"]["max_abs"] == floor.max_abs
    # noise_multiple 0: atol/rtol alone, and the same runtime fails
    strict = verify_stages(model, [Stage("exact", _float64_runner(model))], feeds, Tolerances(noise_multiple=0))
    assert not strict.ok
    # a real error: one weight of the 4608 off by 0.5% -> far beyond the floor
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    w = numpy_helper.to_array(wrong.graph.initializer[0]).copy()
    w[0, 0, 1, 1] *= 1.005
    wrong.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    failed = verify_stages(model, [Stage("wrong", onnx_runner(wrong))], feeds)
    out = failed.stages[0].outputs[0]
    assert not failed.ok and not out.passed and "also beyond 16x the float32 noise floor" in out.reason


def test_detection_head_in_tnn_runtime_passes_on_the_noise_floor_and_replays(tmp_path):
    """End to end: the large-coordinate head ported to TNN and judged by TNN's runtime misses
    atol/rtol by float rounding alone, and passes on its noise floor; with the floor turned off it
    fails, and reproduce.sh reruns exactly that target stage (the file, in the runtime)."""
    need(TNN_RUN)
    path = save(head_model(), tmp_path / "head.onnx")
    res = cli("port", path, "--to", "tnn", "-o", str(tmp_path / "o"), "--runtime", f"tnn={TNN_RUN}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "float32 noise)" in res.stdout
    verify = json.loads((tmp_path / "o" / "verify" / "verify.json").read_text())
    out = next(s for s in verify["stages"] if s["name"] == "target:tnn")["outputs"][0]
    assert out["judged_by"] == "noise floor" and out["metrics"]["mismatched"] > 0
    assert out["metrics"]["max_abs"] <= 16 * out["noise_floor"]["max_abs"]
    profile = tmp_path / "strict.yaml"
    profile.write_text("noise_multiple: 0\n")
    res = cli("port", path, "--to", "tnn", "-o", str(tmp_path / "s"), "--runtime", f"tnn={TNN_RUN}",
              "--tolerances", str(profile))
    assert res.returncode == 4
    script = (tmp_path / "s" / "verify" / "reproduce.sh").read_text().splitlines()[-1]
    assert f"{(tmp_path / 's' / 'head.tnnproto').resolve()}" in script and f"--runtime tnn={TNN_RUN}" in script
    args = script.split()[2:]  # edgeconv verify ...
    again = cli("verify", *args, "-o", str(tmp_path / "again"))
    assert again.returncode == 4 and "target:tnn (TNN x86 runtime (tnn_run))" in again.stderr


def test_mace_dsp_never_ships_a_float_file(tmp_path):
    """`check` says "dsp runs only uint8 models": `port --to mace --hw dsp` on a float model either
    quantizes (needs calibration data: one line, exit 2) or writes Hexagon NN nodes only (uint8,
    no float MACE op), judged by the reader alone: `unverified`, exit 8."""
    path = save(conv_model(), tmp_path / "m.onnx")
    res = cli("port", path, "--to", "mace", "--hw", "dsp", "-o", str(tmp_path / "a"))
    assert res.returncode == 2 and "needs calibration data" in res.stderr and not (tmp_path / "a").exists()
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(0).uniform(-1, 1, (16, 1, 3, 8, 8)).astype(np.float32))
    result = port(path, to="mace", hw="dsp", out=tmp_path / "b", calibration=str(calib))
    assert (result.status, result.exit_code) == ("unverified", 8), result.reason
    assert "no DSP runtime exists here" in result.reason
    ops = json.loads((tmp_path / "b" / "report.json").read_text())["artifact"]["meta"]["ops"]
    assert ops == ["QuantizeINPUT_f_to_8", "Supernode_8x8p32to8", "DequantizeOUTPUT_8tof"]


def test_mace_runtime_judges_cpu_files_and_the_graph_of_gpu_files(tmp_path):
    """mace_run refuses a GPU file ("doesn't support the runtime type"), so it runs the GPU file's
    graph from a copy switched to CPU and the verdict says so (tests/test_gpu_files.py); DSP files
    (Hexagon NN nodes) stay with the reader."""
    need(MACE_RUN)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="mace", hw="gpu", out=tmp_path / "g", runtimes={"mace": str(MACE_RUN)})
    assert result.status == "ok" and result.oracle == ("MACE CPU runtime (mace_run) on the GPU file's graph; "
                                                       "GPU kernels not run here")
    assert resolve("mace", {"mace": str(MACE_RUN)}, "dsp") is None
    assert resolve("mace", {"mace": str(MACE_RUN)}, "cpu").oracle_name("cpu") == "MACE CPU runtime (mace_run)"


def test_zoo_detector_on_mace_cpu_in_mace_run(tmp_path, zoo_onnx_path):
    """The issue's "wrong numbers called ok" on MACE: the detector's score branch ends in a Reshape
    (a graph output reusing its input's buffer), which mace_run overwrote with a later tensor
    (allocate_opt_strategy.cc:213-216), off by 0.5 while the reader said ok.  The exporter now
    copies such outputs (Eltwise x 1.0), and mace_run agrees."""
    need(MACE_RUN)
    result = port(str(zoo_onnx_path("detector")), to="mace", hw="cpu", out=tmp_path / "o", runtimes={"mace": str(MACE_RUN)})
    assert result.oracle == "MACE CPU runtime (mace_run)"
    assert result.status == "ok", result.reason


def test_port_judged_by_tnn_own_tnntest(tmp_path):
    """TNN's own TNNTest as the runtime (the tool a TNN user has): text I/O, six decimals."""
    need(TNN_TEST)
    path = save(conv_model(), tmp_path / "m.onnx")
    result = port(path, to="tnn", hw="arm", out=tmp_path / "o", runtimes={"tnn": str(TNN_TEST)})
    assert (result.status, result.oracle) == ("ok", "TNN x86 runtime (TNNTest, 6-decimal text output)")
    stage = result.report["verification"]["stages"][-1]
    assert 0 < stage["outputs"][0]["metrics"]["max_abs"] <= 1e-5  # the six printed decimals


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_rank3_pad_ports_to_mace_as_a_4d_pad_judged_by_mace_run(tmp_path, mode):
    """MobileBERT's sequence pad of its [1, L, D] embeddings: MACE's Pad takes 8 values, so
    pad_rank_to_4 pads a [1, 1, L, D] view; mace_run runs the file and matches the original."""
    need(MACE_RUN)
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)], "pad3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9, 4])],
        [numpy_helper.from_array(np.int64([0, 1, 0, 0, 2, 0]), "pads"),
         numpy_helper.from_array(np.float32(0.25 if mode == "constant" else 0.0), "value")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result = port(model, to="mace", out=tmp_path / "out", runtimes={"mace": str(MACE_RUN)})
    assert result.status == "ok", result.reason
    assert [a["rule"] for a in result.report["applied_rules"]] == ["pad_rank_to_4"]
    stage = result.report["verification"]["stages"][-1]
    assert stage["oracle"]["kind"] == "runtime" and stage["status"] == "pass"
    assert max(o["metrics"]["max_abs"] for o in stage["outputs"]) == 0.0
    assert result.oracle == "MACE CPU runtime (mace_run)"
