"""The contract every target keeps (``converter/targets/base.py``), checked on every registered
target: the four built-ins and ``onnxcopy``, a test-only fifth target defined and registered here
(a package of its own would look the same: a Target, an OpRegistry, ``targets.register``).

Also: a bug in one op's mapping is the same documented failure on every target (exit 3,
"<Target> cannot express node ..."), whatever the exception the handler raised.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from converter import targets
from converter.errors import EXIT_UNSUPPORTED, BadInput, Unsupported
from converter.ir.graph import to_graph, to_model
from converter.targets.base import Artifact, ExportOptions, Target
from converter.targets.driver import NodeContext, lower_nodes
from converter.targets.registry import DuplicateRegistration, OpRegistry

BUILTIN = ("tflite", "tnn", "mace", "coreml")

# -- onnxcopy: a fifth target that lives in this module only ----------------------------------------

COPY_OPS = OpRegistry("onnxcopy", title="ONNX-copy", skip={"Constant"}, missing="onnxcopy copies only Conv, Relu and Add")


class CopyContext(NodeContext):
    title = COPY_OPS.title

    def __init__(self):
        self.nodes = []


@COPY_OPS.register("Conv", "Relu", "Add")
def copy_node(ctx: CopyContext, node) -> None:
    """The "format" is ONNX itself: a supported node is written as it is."""
    ctx.nodes.append(node)


class OnnxCopyTarget(Target):
    """Writes ``<name>.onnx`` holding the nodes the driver lowered, runs it in onnxruntime."""

    name = "onnxcopy"
    title = COPY_OPS.title
    hardware = ("cpu",)
    default_hw = "cpu"
    ops = COPY_OPS

    def export(self, model, out_dir, hw, options=None) -> Artifact:
        options = options or ExportOptions()
        self.check_hw(hw)
        graph = to_graph(model)
        ctx = CopyContext()
        lower_nodes(COPY_OPS, ctx, graph.nodes, model=model)
        graph.nodes = list(ctx.nodes)
        written = to_model(graph)
        path = Path(out_dir) / f"{options.name or 'model'}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(written.SerializeToString(deterministic=True))
        return Artifact(self.name, hw, [path], Path(out_dir), meta={"nodes": len(ctx.nodes)}, runtime="onnxruntime")

    def run(self, artifact, inputs):
        session = ort.InferenceSession(str(artifact.files[0]), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs)))


COPY_MATRIX = """\
upstreams:
  onnx/onnx: "1111111111111111111111111111111111111111"
frameworks:
  onnxcopy:
    title: ONNX copy (a test-only target)
    source: onnx/onnx@1111111:docs/Operators.md#L1
    hardware:
      cpu:
        title: onnxruntime CPU
        source: onnx/onnx@1111111:docs/Operators.md#L1
        properties: {max_outputs: null}
    ops:
      Conv: {target: Conv, supported: [cpu]}
      Relu: {target: Relu, supported: [cpu]}
      Add: {target: Add, supported: [cpu]}
"""
ALL = BUILTIN + ("onnxcopy",)


@pytest.fixture(autouse=True)
def onnxcopy_registered():
    targets.register("onnxcopy", OnnxCopyTarget())
    yield
    targets.unregister("onnxcopy")


@pytest.fixture
def copy_overlay(tmp_path) -> str:
    path = tmp_path / "onnxcopy.yaml"
    path.write_text(COPY_MATRIX)
    return str(path)


# -- the model every target exports ----------------------------------------------------------------


def conv_relu_add(seed: int = 7) -> onnx.ModelProto:
    """y = Relu(Conv(x)) + Conv(x): seeded weights, static shapes, normalized (nodes conv_0, relu_0, add_0)."""
    from converter.frontend.normalize import normalize

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "c"], ["y"], name="add")],
        "contract", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    return normalize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- the contract -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_target_declares_the_interface(name):
    target = targets.get(name)
    assert isinstance(target, Target) and target.name == name and name in targets.names()
    assert target.default_hw in target.hardware
    assert isinstance(target.custom_layers, bool) and target.title
    assert isinstance(target.ops, OpRegistry) and {"Conv", "Relu", "Add"} <= set(target.ops)


@pytest.mark.parametrize("name", BUILTIN)
def test_default_hw_is_the_matrix_cpu(name):
    from converter.matrix import load_matrix

    matrix = load_matrix()
    target = targets.get(name)
    assert set(target.hardware) == set(matrix.hardware(name))
    assert matrix.resolve_hw(name, "cpu") == target.default_hw == {"tnn": "arm"}.get(name, "cpu")


@pytest.mark.parametrize("name", ALL)
def test_export_is_deterministic_and_runs_like_onnxruntime(name, tmp_path):
    target, model = targets.get(name), conv_relu_add()
    options = ExportOptions(name="contract")
    first = target.export(model, tmp_path / "a", target.default_hw, options)
    target.export(model, tmp_path / "b", target.default_hw, options)
    assert first.files and all(Path(f).exists() for f in first.files)
    files = _files(tmp_path / "a")
    assert files and files == _files(tmp_path / "b")  # byte-identical, same names

    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = target.run(first, {"x": x})
    assert set(got) == {"y"} and got["y"].shape == want.shape
    assert float(np.max(np.abs(got["y"] - want))) <= 1e-4


@pytest.mark.parametrize("name", ALL)
def test_export_refuses_unknown_hardware_and_writes_nothing(name, tmp_path):
    target = targets.get(name)
    with pytest.raises(BadInput, match=rf"unknown {target.title} hardware 'fpga9'; choose one of: "):
        target.export(conv_relu_add(), tmp_path / "out", "fpga9")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("name", ALL)
def test_a_node_outside_onnx_domain_is_unsupported(name, tmp_path):
    model = conv_relu_add()
    model.graph.node[1].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    title = targets.get(name).title
    with pytest.raises(Unsupported, match=rf"^{title} cannot express node 'relu_0' \(Relu\): .*domain 'com.example'"):
        targets.get(name).export(model, tmp_path / "out", targets.get(name).default_hw)


def test_a_second_registration_of_an_op_fails_at_once():
    ops = OpRegistry("t")
    ops.register("Relu")(copy_node)
    with pytest.raises(DuplicateRegistration, match="op 'Relu' is registered twice"):
        ops.register("Sigmoid", "Relu")(copy_node)


def test_targets_register_refuses_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):
        targets.register("tflite", OnnxCopyTarget())
    assert targets.get("tflite").name == "tflite"


# -- one documented failure for a broken mapping ----------------------------------------------------


def _boom(ctx, node):
    raise KeyError("boom")


@pytest.mark.parametrize("name", ALL)
def test_a_refused_export_leaves_no_state_behind(name, monkeypatch, tmp_path):
    """Same input, same bytes, even after an export failed half-way in this process (CoreML's
    builder numbers const names from counters coremltools resets only after a success)."""
    target, model = targets.get(name), conv_relu_add()
    target.export(model, tmp_path / "before", target.default_hw)
    with monkeypatch.context() as patch:
        patch.setitem(target.ops.handlers, "Add", _boom)
        with pytest.raises(Unsupported):
            target.export(model, tmp_path / "refused", target.default_hw)
    target.export(model, tmp_path / "after", target.default_hw)
    assert _files(tmp_path / "before") == _files(tmp_path / "after")


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("error", [KeyError("boom"), IndexError("boom"), TypeError("boom"), ValueError("boom"),
                                   AssertionError("boom"), NotImplementedError("boom")])
def test_a_failing_handler_is_unsupported_on_every_target(name, error, monkeypatch, tmp_path):
    target = targets.get(name)

    def broken(ctx, node):
        raise error

    monkeypatch.setitem(target.ops.handlers, "Relu", broken)
    with pytest.raises(Unsupported) as info:
        target.export(conv_relu_add(), tmp_path / "out", target.default_hw)
    assert str(info.value) == (f"{target.title} cannot express node 'relu_0' (Relu): "
                               f"cannot be mapped ({type(error).__name__}: {error})")


@pytest.mark.parametrize("name", ALL)
def test_port_reports_a_broken_mapping_as_unsupported_exit_3(name, monkeypatch, tmp_path, capsys, copy_overlay):
    from converter.cli import main

    model_path = tmp_path / "m.onnx"
    onnx.save(conv_relu_add(), model_path)
    target = targets.get(name)
    monkeypatch.setitem(target.ops.handlers, "Relu", _boom)
    out = tmp_path / "out"
    code = main(["port", str(model_path), "--to", name, "-o", str(out), "--no-verify", "--json",
                 "--matrix-overlay", copy_overlay])
    assert code == EXIT_UNSUPPORTED
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "unsupported" and report["hw"] == target.default_hw
    assert report["reason"] == (f"export: {target.title} cannot express node 'relu_0' (Relu): "
                                "cannot be mapped (KeyError: 'boom')")


# -- the fifth target, end to end --------------------------------------------------------------------


def test_a_registered_target_ports_end_to_end(tmp_path, copy_overlay):
    from converter.port import port

    model_path = tmp_path / "m.onnx"
    onnx.save(conv_relu_add(), model_path)
    result = port(str(model_path), to="onnxcopy", hw=None, out=tmp_path / "out", matrix_overlays=(copy_overlay,))
    assert (result.status, result.hw, result.exit_code) == ("ok", "cpu", 0), result.reason
    assert "m.onnx" in result.files and "report.json" in result.files
    assert result.report["verification"]["ok"] is True
    written = onnx.load(tmp_path / "out" / "m.onnx")
    assert [n.op_type for n in written.graph.node] == ["Conv", "Relu", "Add"]


def test_the_cli_ports_to_a_registered_target_with_its_overlay(tmp_path, capsys, copy_overlay):
    from converter.cli import main

    model_path = tmp_path / "m.onnx"
    onnx.save(conv_relu_add(), model_path)
    code = main(["port", str(model_path), "--to", "onnxcopy", "-o", str(tmp_path / "out"), "--json",
                 "--matrix-overlay", copy_overlay])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary
    assert [(r["target"], r["hw"], r["status"]) for r in summary["results"]] == [("onnxcopy", "cpu", "ok")]
