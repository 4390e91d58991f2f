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
        lower_nodes(COPY_OPS, ctx, graph.nodes, model=model, custom=self.custom_hook)
        graph.nodes = list(ctx.nodes)
        written = to_model(graph)
        path = Path(out_dir) / f"{options.name or 'model'}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(written.SerializeToString(deterministic=True))
        return Artifact(self.name, hw, [path], Path(out_dir), meta={"nodes": len(ctx.nodes)}, runtime="onnxruntime")

    #: How the driver writes a custom-layer node (None: this format has no custom layers).
    custom_hook = None

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
                               f"cannot be mapped: {error}")


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
                                "cannot be mapped: 'boom'")


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


# -- the fifth target's own capabilities: custom layers and a real runtime -------------------------


class ScaffoldingCopyTarget(OnnxCopyTarget):
    """onnxcopy with its own custom-layer scaffold (one header per op type) and a pluggable
    "real runtime" (onnxruntime in a child process, found by ``--runtime onnxcopy=PATH``)."""

    runtime_env = "EDGECONV_ONNXCOPY_RUNTIME"

    @staticmethod
    def custom_hook(ctx, node, layer, attrs) -> None:
        """A custom layer in the copy: the node, renamed to its layer type in a domain of its own."""
        node.op, node.domain = layer, "onnxcopy.custom"
        ctx.nodes.append(node)

    def custom_layer_name(self, op) -> str:
        return "Copy" + op.symbol

    def custom_layer_files(self, ops, name: str) -> dict[str, bytes]:
        return {f"onnxcopy/{name}.h": f"// {name}: {len(ops)} node(s)\n".encode()}

    def custom_layer_registration(self, op, name: str) -> str:
        return f"Register {name} with the copier."

    def load_runtime(self, path):
        return ChildOnnxRuntime(path)


class ChildOnnxRuntime:
    """A stand-in real runtime: the exported file, run by onnxruntime in another process."""

    exposes_intermediates = False

    def __init__(self, path):
        from converter.errors import BadInput

        self.path = Path(path)
        if not self.path.is_file():
            raise BadInput(f"--runtime onnxcopy={path}: no such file")

    def oracle_name(self, hw: str) -> str:
        return "onnxcopy child runtime"

    def serves(self, hw: str) -> bool:
        return True

    def run(self, artifact, inputs):
        import subprocess
        import sys

        feeds = Path(artifact.out_dir) / "feeds.npz"
        np.savez(feeds, **inputs)
        code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1]); "
                "f = dict(np.load(sys.argv[2])); n = [o.name for o in s.get_outputs()]; "
                "np.savez(sys.argv[3], **dict(zip(n, s.run(n, f))))")
        outs = Path(artifact.out_dir) / "outs.npz"
        subprocess.run([sys.executable, "-c", code, str(artifact.files[0]), str(feeds), str(outs)], check=True)
        result = dict(np.load(outs))
        feeds.unlink()
        outs.unlink()
        return result


SIGMOID_OVERLAY = COPY_MATRIX + "      Sigmoid: {supported: []}\n"


def conv_sigmoid_add() -> onnx.ModelProto:
    """conv_relu_add with a Sigmoid (which onnxcopy lacks) instead of the Relu."""
    from converter.frontend.normalize import normalize

    model = conv_relu_add()
    model.graph.node[1].op_type = "Sigmoid"
    return normalize(model)  # names the node after its op


def test_the_fifth_target_checks_plans_and_scaffolds_a_custom_layer(tmp_path):
    """check, plan, export and the custom-layer scaffold through the fifth target's own
    declarations only (no other package names it): exit 7 with its files."""
    from converter.matrix import load_matrix
    from converter.legalize.check import check_model
    from converter.legalize.plan import plan_model
    from converter.port import port

    overlay = tmp_path / "copy.yaml"
    overlay.write_text(SIGMOID_OVERLAY)
    targets.register("onnxcopy", ScaffoldingCopyTarget(), replace=True)
    matrix = load_matrix(None, (str(overlay),))
    model = conv_sigmoid_add()
    verdicts = {v.node: v.status for v in check_model(model, "onnxcopy", "cpu", matrix).verdicts}
    assert verdicts == {"conv_0": "supported", "sigmoid_0": "unsupported", "add_0": "supported"}
    remedies = {e.node: e.remedy for e in plan_model(model, "onnxcopy", "cpu", matrix).entries}
    assert remedies["sigmoid_0"] == "postprocess"  # trailing: generated code would take it
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = port(str(path), to="onnxcopy", out=tmp_path / "out", matrix_overlays=(str(overlay),),
                  custom_ops=["Sigmoid"])
    assert (result.status, result.exit_code) == ("needs_custom", 7), result.reason
    assert result.reason.startswith("needs custom kernels: 1 op (sigmoid_0)")
    [layer] = result.report["custom_layers"]
    assert (layer["layer"], layer["framework"]) == ("CopySigmoid", "onnxcopy")
    scaffold = tmp_path / "out" / "custom" / "Sigmoid"
    assert (scaffold / "onnxcopy" / "CopySigmoid.h").read_text() == "// CopySigmoid: 1 node(s)\n"
    assert "Register CopySigmoid with the copier." in (scaffold / "README.md").read_text()
    written = onnx.load(tmp_path / "out" / "m.onnx")
    assert [(n.op_type, n.domain) for n in written.graph.node] == [
        ("Conv", ""), ("CopySigmoid", "onnxcopy.custom"), ("Add", "")]


def test_the_fifth_target_refuses_custom_layers_it_cannot_carry(tmp_path):
    """A target without custom layers (``custom_layers = False``) ports such a model as
    unsupported (exit 3), naming the node; the base Target refuses a scaffold it has none for."""
    from converter.port import port

    class NoCustom(OnnxCopyTarget):
        custom_layers = False

    overlay = tmp_path / "copy.yaml"
    overlay.write_text(SIGMOID_OVERLAY)
    targets.register("onnxcopy", NoCustom(), replace=True)
    path = tmp_path / "m.onnx"
    onnx.save(conv_sigmoid_add(), path)
    result = port(str(path), to="onnxcopy", out=tmp_path / "out", matrix_overlays=(str(overlay),),
                  custom_ops=["Sigmoid"])
    assert (result.status, result.exit_code) == ("unsupported", 3)
    assert "nodes needing one: sigmoid_0" in result.reason
    with pytest.raises(BadInput, match="no custom-layer scaffold for ONNX-copy"):
        OnnxCopyTarget().custom_layer_files([], "x")


def test_the_fifth_target_is_judged_by_its_own_runtime(tmp_path, monkeypatch):
    """``--runtime onnxcopy=PATH`` and the target's environment variable select the runtime the
    target declares; the verdict names it."""
    from converter.port import port
    from converter.targets.oracles import parse_runtime_flags, pluggable

    targets.register("onnxcopy", ScaffoldingCopyTarget(), replace=True)
    assert pluggable()["onnxcopy"] == "EDGECONV_ONNXCOPY_RUNTIME"
    tool = tmp_path / "copy_runner"
    tool.write_text("")
    assert parse_runtime_flags([f"onnxcopy={tool}"]) == {"onnxcopy": str(tool)}
    overlay = tmp_path / "copy.yaml"
    overlay.write_text(COPY_MATRIX)
    path = tmp_path / "m.onnx"
    onnx.save(conv_relu_add(), path)
    result = port(str(path), to="onnxcopy", out=tmp_path / "a", matrix_overlays=(str(overlay),),
                  runtimes={"onnxcopy": str(tool)})
    assert (result.status, result.oracle) == ("ok", "onnxcopy child runtime"), result.reason
    stage = result.report["verification"]["stages"][-1]
    assert stage["oracle"] == {"name": "onnxcopy child runtime", "kind": "runtime"}
    monkeypatch.setenv("EDGECONV_ONNXCOPY_RUNTIME", str(tool))
    again = port(str(path), to="onnxcopy", out=tmp_path / "b", matrix_overlays=(str(overlay),))
    assert again.oracle == "onnxcopy child runtime"
    with pytest.raises(BadInput, match="no such file"):
        port(str(path), to="onnxcopy", out=tmp_path / "c", matrix_overlays=(str(overlay),),
             runtimes={"onnxcopy": str(tmp_path / "missing")})
