"""Stage comparison against the original, tolerance profiles, post-processing and targets."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from converter.errors import BadInput, RuntimeUnavailable
from converter.ir.graph import to_graph, to_model
from converter.verify import (Stage, Tolerance, Tolerances, compose, load_tolerances, onnx_runner,
                              target_runner, verify_port, verify_stages)
from converter.runtimes.feeds import random_inputs


@pytest.fixture(scope="module")
def resnet(zoo_model):
    return zoo_model("resnet")


@pytest.fixture(scope="module")
def detector(zoo_model):
    return zoo_model("detector")


def offset_output(model: onnx.ModelProto, output: str, delta: float) -> onnx.ModelProto:
    """``output`` + ``delta``: the producer writes a renamed tensor, an Add writes ``output``."""
    graph = to_graph(model)
    out = graph.tensors()[output]
    pre = gs.Variable(output + "_pre", dtype=out.dtype, shape=out.shape)
    producer = out.inputs[0]
    producer.outputs[producer.outputs.index(out)] = pre
    graph.nodes.append(gs.Node("Add", name="offset", inputs=[pre, gs.Constant("delta", np.array(delta, np.float32))], outputs=[out]))
    return to_model(graph)


# ---------------------------------------------------------------------------- tolerances


def test_tolerance_defaults_and_flags():
    t = load_tolerances()
    assert t.default == Tolerance(1e-4, 1e-3) and t.layer_rmse == 1e-3 and t.outputs == {}
    t = load_tolerances(atol=0.5, rtol=0.0, layer_rmse=0.1)
    assert t.for_output("anything") == Tolerance(0.5, 0.0) and t.layer_rmse == 0.1


def test_profile_per_output_wins_over_flags_over_profile(tmp_path):
    profile = tmp_path / "tol.yaml"
    # "1e-2" without a dot is a string to PyYAML; it must still be read as a number.
    profile.write_text("atol: 1e-2\nrtol: 0.0\nlayer_rmse: 0.05\noutputs:\n  boxes: {atol: 0.5}\n  scores: {rtol: 0.25}\n")
    t = load_tolerances(profile)
    assert t.default == Tolerance(1e-2, 0.0) and t.layer_rmse == 0.05
    assert t.for_output("boxes") == Tolerance(0.5, 0.0)
    assert t.for_output("scores") == Tolerance(1e-2, 0.25)
    t = load_tolerances(profile, atol=1e-3)
    assert t.default.atol == 1e-3
    assert t.for_output("scores") == Tolerance(1e-3, 0.25)  # inherits the flag
    assert t.for_output("boxes").atol == 0.5  # the most specific setting wins


@pytest.mark.parametrize("text, message", [
    ("atol: 1\nbogus: 2\n", r"unknown key\(s\) bogus"),
    ("atol: -1\n", "expected a finite number >= 0"),
    ("rtol: fast\n", "expected a number, got 'fast'"),
    ("outputs:\n  boxes: {tol: 1}\n", r"outputs.boxes: unknown key\(s\) tol"),
    ("outputs: [1, 2]\n", "'outputs' must map output names"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("atol: [1\n", "not valid YAML"),
])
def test_bad_profiles_are_one_line(tmp_path, text, message):
    profile = tmp_path / "bad.yaml"
    profile.write_text(text)
    with pytest.raises(BadInput, match=message) as info:
        load_tolerances(profile)
    assert "\n" not in str(info.value)


def test_missing_profile_and_bad_flag(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_tolerances(tmp_path / "none.yaml")
    with pytest.raises(BadInput, match="--atol"):
        load_tolerances(atol=float("nan"))


# ------------------------------------------------------------------------------- stages


def test_identical_stage_passes_with_zero_error(resnet):
    samples = random_inputs(resnet, seed=0, samples=2)
    report = verify_stages(resnet, [("same", onnx_runner(resnet))], samples)
    assert report.ok and report.stages[0].status == "pass"
    m = report.stages[0].outputs[0].metrics
    assert (m.max_abs, m.max_rel, m.cosine, m.sqnr_db, m.mismatched, m.size) == (0.0, 0.0, 1.0, float("inf"), 0, 20)


def test_normalized_stage_against_raw_export(resnet, zoo_onnx_path):
    raw = onnx.load(zoo_onnx_path("resnet"))
    report = verify_stages(raw, [Stage("normalized", onnx_runner(resnet), model=resnet, reference=raw)],
                           random_inputs(raw, seed=1, samples=3))
    out = report.stages[0].outputs[0]
    assert report.ok and out.metrics.max_abs < 1e-5 and out.metrics.cosine > 0.999999


def test_per_output_tolerance(detector):
    shifted = offset_output(detector, "boxes", 1e-3)
    samples = random_inputs(detector, seed=0)
    strict = verify_stages(detector, [Stage("shifted", onnx_runner(shifted), model=shifted)], samples)
    scores, boxes = strict.stages[0].outputs
    assert (scores.name, scores.passed, boxes.name, boxes.passed) == ("scores", True, "boxes", False)
    assert boxes.metrics.max_abs == pytest.approx(1e-3, rel=1e-3)
    assert boxes.metrics.mismatched > 0 and "output 'boxes'" in strict.stages[0].reason
    # The Add that shifts 'boxes' is the last node; localization names it (no provenance: the
    # Add writes the graph output, 'boxes_pre' is unmapped).
    assert strict.stages[0].layers.first.tensor == "boxes"
    assert "so layers were judged against" in strict.stages[0].reason  # 1e-3 is below the layer tolerance

    lenient = verify_stages(detector, [Stage("shifted", onnx_runner(shifted))], samples,
                            Tolerances(outputs={"boxes": Tolerance(atol=2e-3, rtol=0.0)}))
    assert lenient.ok
    with pytest.raises(BadInput, match="tolerances name output"):
        verify_stages(detector, [("s", onnx_runner(shifted))], samples, Tolerances(outputs={"box": Tolerance()}))


def _cut_at(model: onnx.ModelProto, tensor: str) -> onnx.ModelProto:
    graph = to_graph(model)
    graph.outputs = [graph.tensors()[tensor]]
    return to_model(graph)


def _gemm_postprocess(model: onnx.ModelProto, sign: float = 1.0):
    """numpy post-processing for the ResNet's trailing Gemm (as generated code would do)."""
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gemm.attribute}
    w, b = inits[gemm.input[1]], inits[gemm.input[2]]
    w = w.T if attrs.get("transB", 0) else w

    def postprocess(outputs):
        x = outputs["flatten_0_1"].astype(np.float64)
        return {"output": (sign * (x @ w) + b).astype(np.float32)}

    return postprocess


def test_postprocessing_composes_after_the_cut_model(resnet):
    cut = _cut_at(resnet, "flatten_0_1")
    assert [o.name for o in cut.graph.output] == ["flatten_0_1"] and len(cut.graph.node) == 22
    samples = random_inputs(resnet, seed=2, samples=2)
    good = verify_stages(resnet, [Stage("legalized", compose(onnx_runner(cut), _gemm_postprocess(resnet)), model=cut)], samples)
    assert good.ok and good.stages[0].outputs[0].metrics.max_abs < 1e-5

    bad = verify_stages(resnet, [Stage("legalized", compose(onnx_runner(cut), _gemm_postprocess(resnet, -1.0)), model=cut)], samples)
    stage = bad.stages[0]
    assert stage.status == "fail" and stage.layers.first is None and len(stage.layers.layers) == 22
    assert "the error arises after them (post-processing or runtime)" in stage.reason


class OnnxFileTarget:
    """A target whose file is an .onnx written to disk and run by onnxruntime from that file."""

    name = "onnxfile"
    hardware = ("cpu",)

    def export(self, model, out_dir, hw, options=None):
        from converter.targets.base import Artifact

        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "model.onnx"
        onnx.save(model, path)
        return Artifact(self.name, hw, [path], out_dir, runtime="onnxruntime")

    def run(self, artifact, inputs):
        outputs = onnx_runner(artifact.files[0])(inputs)
        return {f"Identity_{i}": v for i, v in enumerate(outputs.values())}  # runtimes rename outputs


class NoRuntimeTarget(OnnxFileTarget):
    name = "noruntime"

    def run(self, artifact, inputs):
        raise RuntimeUnavailable("noruntime: no runtime for this target on Linux")


def test_targets_plug_in_through_run(resnet, tmp_path):
    target, absent = OnnxFileTarget(), NoRuntimeTarget()
    artifact = target.export(resnet, tmp_path, "cpu")
    samples = random_inputs(resnet, seed=3)
    report = verify_stages(resnet, [
        (f"target:{target.name}", target_runner(target, artifact)),
        (f"target:{absent.name}", target_runner(absent, artifact)),
        ("crashes", lambda x: 1 / 0),
    ], samples)
    found, skipped, crashed = report.stages
    assert found.status == "pass" and found.outputs[0].candidate == "Identity_0"  # matched by position
    assert skipped.status == "skipped" and "no runtime" in skipped.reason
    assert crashed.status == "error" and crashed.reason == "could not run: division by zero"
    assert not report.ok and report.first_failure is crashed


def test_output_shape_and_missing_output_fail(resnet):
    samples = random_inputs(resnet, seed=0)
    report = verify_stages(resnet, [
        ("wrong shape", lambda x: {"output": np.zeros((2, 10), np.float32)}),
        ("size-1 axes only", lambda x: {"output": onnx_runner(resnet)(x)["output"].reshape(1, 1, 10)}),
        ("zeros", lambda x: {"output": np.zeros((1, 10), np.float32), "extra": np.zeros(1)}),
        ("missing", lambda x: {"logits": np.zeros((1, 10), np.float32), "extra": np.zeros(1)}),
    ], samples)
    wrong, squeezed, zeros, missing = report.stages
    assert wrong.status == "fail" and "has shape [2, 10], expected [1, 10]" in wrong.reason
    assert squeezed.status == "pass"
    assert zeros.status == "fail" and zeros.outputs[0].metrics.cosine == 0.0  # extra outputs are ignored
    assert missing.status == "fail" and missing.reason == "output 'output' is missing"


def test_verify_port_runs_every_stage_and_writes_replay(resnet, zoo_onnx_path, tmp_path):
    from converter.legalize.rewrites import apply_rule

    raw = onnx.load(zoo_onnx_path("resnet"))
    legalized = apply_rule(resnet, "relu_to_max", "relu_4")
    target = OnnxFileTarget()
    artifact = target.export(legalized, tmp_path / "t", "cpu")
    ok = verify_port(raw, resnet, legalized, target=target, artifact=artifact, out_dir=tmp_path / "ok")
    assert ok.ok and [s.name for s in ok.stages] == ["normalized", "legalized", "target:onnxfile"]
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["verify.html", "verify.json"]

    broken = offset_output(legalized, "output", 0.5)
    bad = verify_port(raw, resnet, broken, out_dir=tmp_path / "bad", replay_files=("a.onnx", "b.onnx"))
    assert [s.status for s in bad.stages] == ["pass", "fail"]
    assert bad.stages[1].layers.first.node == "gemm_0"  # against the normalized model's names
    assert (tmp_path / "bad" / "verify-inputs.npz").is_file() and "--inputs" in bad.replay["command"]
