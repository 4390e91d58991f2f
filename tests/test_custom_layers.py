"""Remedy (4): custom-layer scaffolds for every framework, kernels compiled with g++ and proven
against onnxruntime on saved node data, and the custom op inside the exported model files.

Compiles: one harness per op (GridSample, Einsum, com.example.ScaledTanh), each also running the
TFLite TfLiteRegistration against a stand-in of TFLite's C API (tests/custom_support) and the
real FlexBuffers reader (Debian libflatbuffers-dev), plus one re-compile of ScaledTanh after
its marked body is filled in.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from custom_models import EINSUM_EQUATIONS, GRID_SAMPLE_MODES, custom_ops_model, grid_sample_model  # noqa: E402

from converter.custom import CUSTOM_NODES_KEY, custom_nodes_of  # noqa: E402
from converter.errors import BadInput  # noqa: E402


def write_custom_layers(model, nodes, framework, out_dir, **kwargs):
    """The scaffold as a port writes it: the framework's target, the planner's explanation."""
    from converter import targets
    from converter.custom import write_custom_layers as write
    from converter.legalize.why_custom import why_custom

    return write(model, nodes, targets.get(framework), out_dir, why=lambda g, n: why_custom(g, n, framework), **kwargs)


STANDIN = Path(__file__).parent / "custom_support"
FLEXBUFFERS = Path("/usr/include/flatbuffers/flexbuffers.h")
CUSTOM_OPS = ("GridSample", "Einsum", "ScaledTanh")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or not FLEXBUFFERS.exists(),
                               reason="needs g++ and flexbuffers.h (apt-get install g++ libflatbuffers-dev)")


def _custom_node_names(model) -> set[str]:
    return {n.name for n in model.graph.node if n.op_type in CUSTOM_OPS}


@pytest.fixture(scope="module")
def scaffolds(tmp_path_factory):
    """{framework: (out_dir, results)} for the custom-ops model."""
    out = {}
    for framework in ("tflite", "tnn", "mace", "coreml"):
        root = tmp_path_factory.mktemp(f"custom_{framework}")
        model = custom_ops_model()
        out[framework] = (root, write_custom_layers(model, _custom_node_names(model), framework, root), model)
    return out


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_framework_gets_a_scaffold_with_reasons(scaffolds, tmp_path):
    expected = {
        "tflite": ["gridsample_tflite.cc"],
        "tnn": ["tnn/gridsample_layer.cc", "tnn/gridsample_layer_interpreter.cc", "tnn/gridsample_layer_param.h",
                "tnn/cpu_gridsample_layer_acc.cc", "tnn/arm_gridsample_layer_acc.cc"],
        "mace": ["mace/gridsample_op.cc"],
        "coreml": ["coreml/README.md", "coreml/GridSampleCustomLayer.swift", "coreml/GridSampleBridge.mm",
                   "coreml/gridsample_mil.py"],
    }
    for framework, (root, results, model) in scaffolds.items():
        assert len(results) == len(GRID_SAMPLE_MODES) + 1 + len(EINSUM_EQUATIONS) + 1
        assert {r["op"] for r in results} == {"GridSample", "Einsum", "com.example.ScaledTanh"}
        for r in results:
            assert "not trailing" in r["why"], r["why"]
            assert r["kernel"] == ("fill-in" if r["op"] == "com.example.ScaledTanh" else "reference")
            for f in r["files"]:
                assert (root / f).is_file(), f
        for f in expected[framework] + ["harness.cpp", "gridsample_kernel.hpp", "README.md"]:
            assert (root / "GridSample" / f).is_file(), (framework, f)
        marks = custom_nodes_of(model)
        assert set(marks) == _custom_node_names(model)
        assert marks["grid_sample_0"]["attrs"] == {"align_corners": 0, "mode": "bilinear", "padding_mode": "zeros"}
    # CoreML says where ML Programs have no path at all.
    coreml_root = scaffolds["coreml"][0]
    assert "**ML Programs have no custom-layer mechanism**" in (coreml_root / "GridSample/coreml/README.md").read_text()
    assert "Composite op (ML Program) — none" in (
        coreml_root / "ScaledTanh_com_example/coreml/README.md").read_text()
    # Deterministic: a second run writes byte-identical files.
    model = custom_ops_model()
    write_custom_layers(model, _custom_node_names(model), "tflite", tmp_path)
    assert _tree_digest(tmp_path) == _tree_digest(scaffolds["tflite"][0])


def test_unknown_node_is_one_clear_error(tmp_path):
    with pytest.raises(BadInput, match="'nope' is not in the model"):
        write_custom_layers(custom_ops_model(), {"nope"}, "tflite", tmp_path)
    assert not any(tmp_path.iterdir())


def _compile(src_dir: Path) -> Path:
    exe = src_dir / "harness"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-DFLATBUFFERS_LOCALE_INDEPENDENT=0",
                    "-DEDGECONV_HARNESS_TFLITE", f"-I{src_dir}", f"-I{STANDIN}", str(src_dir / "harness.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def _run_harness(exe: Path, data_dir: Path) -> tuple[int, str, dict[str, float]]:
    proc = subprocess.run([str(exe), str(data_dir)], capture_output=True, text=True, timeout=60)
    errors = {m.group(1): float(m.group(2)) for m in re.finditer(r"RESULT (\w+) output=0 max_abs=(\S+)", proc.stdout)}
    return proc.returncode, proc.stdout, errors


@needs_gxx
@pytest.mark.parametrize("op, count", [("GridSample", len(GRID_SAMPLE_MODES)), ("Einsum", len(EINSUM_EQUATIONS) + 1)])
def test_reference_and_tflite_kernels_match_onnxruntime(scaffolds, op, count):
    root = scaffolds["tflite"][0] / op
    exe = _compile(root)
    data_dirs = sorted((root / "data").iterdir())
    assert len(data_dirs) == count
    for data_dir in data_dirs:
        code, out, errors = _run_harness(exe, data_dir)
        assert code == 0 and out.strip().endswith("PASS"), (data_dir.name, out)
        assert set(errors) == {"reference", "tflite"}
        assert errors["reference"] < 1e-5 and errors["tflite"] < 1e-5, (data_dir.name, errors)


@needs_gxx
def test_custom_domain_op_fails_clearly_until_its_body_is_written(scaffolds):
    root = scaffolds["tflite"][0] / "ScaledTanh_com_example"
    data_dir = root / "data" / "scaled_tanh"
    code, out, _ = _run_harness(_compile(root), data_dir)
    assert code == 2 and "EDGECONV_NOT_IMPLEMENTED" in out and "com.example.ScaledTanh" in out
    # onnxruntime ran the op through its function body, so the reference outputs are there.
    assert (data_dir / "output_0.bin").stat().st_size == 4 * 1 * 4 * 5 * 4

    kernel = root / "scaledtanh_kernel.hpp"
    text = kernel.read_text()
    body = ("  const float alpha = attrs.Float(\"alpha\", 1.f), beta = attrs.Float(\"beta\", 1.f);\n"
            "  for (int64_t i = 0; i < NumElements(in[0].shape); ++i)\n"
            "    out[0].as<float>()[i] = alpha * std::tanh(beta * in[0].as<float>()[i]);\n"
            "  return \"\";\n")
    filled = re.sub(r"(// >>> EDGECONV FILL IN[^\n]*\n).*?(  // <<< EDGECONV FILL IN)", lambda m: m.group(1) + body + m.group(2),
                    text, flags=re.S)
    assert filled != text
    kernel.write_text("#include <cmath>\n" + filled)
    code, out, errors = _run_harness(_compile(root), data_dir)
    assert code == 0, out
    assert errors["reference"] < 1e-5 and errors["tflite"] < 1e-5


def _tflite_bytes(monkeypatch, model) -> bytes:
    from converter.targets.base import ExportOptions
    from converter.targets.tflite import convert

    assert custom_nodes_of(model)  # the exporter finds the marked nodes itself
    data, _ = convert(model, ExportOptions())
    return data


def test_tflite_file_carries_the_custom_op_and_litert_names_it(monkeypatch, tmp_path):
    from flatbuffers import flexbuffers

    from converter.targets.tflite._generated import schema_generated as fb

    model = grid_sample_model()
    write_custom_layers(model, {"grid_sample"}, "tflite", tmp_path)
    data = _tflite_bytes(monkeypatch, model)
    assert data == _tflite_bytes(monkeypatch, model)  # deterministic
    parsed = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
    customs = [c for c in parsed.operatorCodes if c.builtinCode == fb.BuiltinOperator.CUSTOM]
    assert [c.customCode.decode() if isinstance(c.customCode, bytes) else c.customCode for c in customs] == ["GridSample"]
    ops = [op for op in parsed.subgraphs[0].operators if parsed.operatorCodes[op.opcodeIndex] is customs[0]]
    assert len(ops) == 1
    assert flexbuffers.Loads(bytes(ops[0].customOptions)) == {"align_corners": 0, "mode": "bilinear",
                                                               "padding_mode": "zeros"}
    assert bytes(ops[0].customOptions) == (tmp_path / "GridSample/data/grid_sample/tflite_custom_options.bin").read_bytes()
    # The custom op's tensors keep the ONNX layout the kernel computes in.
    shapes = [list(parsed.subgraphs[0].tensors[i].shape) for i in ops[0].inputs]
    assert shapes == [[1, 3, 6, 7], [1, 5, 4, 2]]

    from ai_edge_litert.interpreter import Interpreter

    with pytest.raises((RuntimeError, ValueError)) as err:
        interpreter = Interpreter(model_content=data)
        interpreter.allocate_tensors()
    assert "unresolved custom op" in str(err.value).lower() and "GridSample" in str(err.value)


def test_mace_net_has_an_op_of_the_layer_type_with_attribute_args(tmp_path):
    from converter.targets.mace import netdef_writer
    from converter.targets.mace._generated import mace_pb2

    model = grid_sample_model()
    write_custom_layers(model, {"grid_sample"}, "mace", tmp_path)
    assert custom_nodes_of(model)  # the exporter finds the marked nodes itself
    pb, *_ = netdef_writer.build(model, "cpu", "m")
    net = mace_pb2.MultiNetDef.FromString(pb).net_def[0]
    (op,) = [o for o in net.op if o.type == "GridSample"]
    args = {a.name: a for a in op.arg}
    assert args["align_corners"].i == 0 and args["mode"].s == b"bilinear" and args["padding_mode"].s == b"zeros"
    assert args["data_format"].i == 2  # NCHW: MACE keeps the ONNX layout for this op
    assert list(op.input) == ["x_relu", "grid"] and list(op.output) == ["sampled"]
    assert 'MACE_REGISTER_OP(op_registry, "GridSample", GridSampleOp' in (
        tmp_path / "GridSample/mace/gridsample_op.cc").read_text()


def test_tnn_proto_has_the_custom_layer_line_its_interpreter_reads(tmp_path):
    from converter.targets.tnn import emit
    from converter.targets.tnn.proto_writer import proto_text

    model = custom_ops_model()
    write_custom_layers(model, {"einsum_0"}, "tnn", tmp_path)
    graph_model = _single_node(model, "einsum_0")
    assert custom_nodes_of(graph_model)  # the marks travel with the model to the exporter
    net, _ = emit.build_net(graph_model)
    line = next(layer for layer in net.layers if layer.type.startswith("Custom"))
    text = proto_text(net)
    assert line.type == "CustomEinsum" and line.params == ["bij%2Cbjk-%3Ebik"]
    assert '"CustomEinsum einsum_0 2 1 a b es0 bij%2Cbjk-%3Ebik ,"' in text
    interp = (tmp_path / "Einsum/tnn/einsum_layer_interpreter.cc").read_text()
    assert 'DECLARE_LAYER_INTERPRETER(CustomEinsum, LAYER_CUSTOMEINSUM)' in interp
    assert 'p->attrs.strings["equation"] = EdgeconvDecode(next());' in interp


def _single_node(model, name):
    """The sub-model of one node (TNN's exporter needs every other node to be mappable)."""
    import onnx

    from converter.ir.graph import to_graph, to_model

    graph = to_graph(model)
    node = next(n for n in graph.nodes if n.name == name)
    graph.inputs = [t for t in node.inputs]
    graph.outputs = list(node.outputs)
    out = to_model(graph)
    for prop in model.metadata_props:
        if prop.key == CUSTOM_NODES_KEY:
            out.metadata_props.add(key=prop.key, value=prop.value)
    return onnx.shape_inference.infer_shapes(out)


def test_planner_assigns_remedy_custom(scaffolds):
    from converter.legalize.plan import plan_model

    plan = plan_model(custom_ops_model(), "tflite", "cpu")
    remedies = {e.node: e.remedy for e in plan.entries}
    # Einsum has an exact MatMul form (einsum_to_matmul) except for a diagonal ("bii->bi").
    diagonal = {"einsum_2"}
    einsums = {n for n in _custom_node_names(custom_ops_model()) if n.startswith("einsum")}
    assert {n for n, r in remedies.items() if r == "custom"} == _custom_node_names(custom_ops_model()) - einsums | diagonal
    assert all(remedies[n] == "rewrite" for n in einsums - diagonal)
    assert all(r == "supported" for n, r in remedies.items() if n in ("relu", "sigmoid"))
