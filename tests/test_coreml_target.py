"""CoreML target: zoo -> .mlpackage, loaded back by coremltools, executed as saved, vs onnxruntime.

On Linux ``run`` executes the saved ML Program in numpy (``mil-numpy``); on macOS it would use
``MLModel.predict`` (``coreml``).  Tolerances:

* fp32 programs (``--hw cpu``/``gpu``): max abs error <= 1e-4.
* fp16 programs (``--hw ane`` default): max abs error <= FP16_REL_TOL * max(1, max |reference|).
  fp16 has a unit roundoff of 2**-11 ~ 4.9e-4; 4e-3 is ~8 roundoffs of the output scale, room for
  the rounding after every op of these 10-20-layer models (measured worst: 6.5e-4 relative, on
  normalized_input).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from converter import __version__
from converter.demo import zoo
from converter.errors import BadInput, MissingExtra, Unsupported
from converter.infra.fsutil import sha256_bytes
from converter.targets.base import ExportOptions

pytest.importorskip("coremltools")

from converter.targets.coreml import TARGET  # noqa: E402
from converter.targets.coreml.mil_builder import supported_onnx_ops  # noqa: E402

FP32_ATOL = 1e-4
FP16_REL_TOL = 4e-3
ROOT = Path(__file__).resolve().parents[1]


def _reference(model: onnx.ModelProto, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _spec(path: Path):
    import coremltools as ct

    return ct.models.MLModel(str(path), skip_model_load=True).get_spec()


@pytest.fixture(scope="module")
def exported(zoo_model, tmp_path_factory):
    """``exported(name, hw) -> (model, artifact)``, cached per module."""
    cache = {}

    def get(name, hw):
        if (name, hw) not in cache:
            model = zoo_model(name)
            out = tmp_path_factory.mktemp(f"coreml-{name}-{hw}")
            cache[name, hw] = model, TARGET.export(model, out, hw, ExportOptions(name=name))
        return cache[name, hw]

    return get


@pytest.mark.parametrize("name", zoo.NAMES)
@pytest.mark.parametrize("hw", ["cpu", "ane"])
def test_zoo_exports_loads_back_and_matches_onnxruntime(exported, name, hw):
    model, artifact = exported(name, hw)
    package = artifact.out_dir / f"{name}.mlpackage"
    assert sorted(p.relative_to(package).as_posix() for p in artifact.files) == [
        "Data/com.apple.CoreML/model.mlmodel", "Data/com.apple.CoreML/weights/weight.bin",
        "Manifest.json"]

    spec = _spec(package)  # coremltools' ModelPackage reader + protobuf parse
    assert spec.WhichOneof("Type") == "mlProgram"
    assert spec.specificationVersion == 7  # iOS16 / macOS13
    assert list(spec.mlProgram.functions) == ["main"]

    feeds = zoo.example_inputs(name)
    want = _reference(model, feeds)
    got = TARGET.run(artifact, feeds)
    assert artifact.runtime == ("coreml" if sys.platform == "darwin" else "mil-numpy")
    assert list(got) == list(zoo.output_names(name))
    for key, ref in want.items():
        assert got[key].shape == ref.shape
        err = float(np.abs(got[key] - ref).max())
        if hw == "cpu":
            assert err <= FP32_ATOL, f"{name}/{key}: fp32 max abs error {err}"
        else:
            bound = FP16_REL_TOL * max(1.0, float(np.abs(ref).max()))
            assert err <= bound, f"{name}/{key}: fp16 max abs error {err} > {bound}"
        # The element-wise tolerance the artifact tells the verifier to use also holds.
        assert np.allclose(got[key], ref, **artifact.meta["suggested_tolerance"])


def test_ane_runs_in_fp16_and_cpu_in_fp32(exported):
    """The fp16 program really computes in fp16 (larger error than fp32, weights stored fp16)."""
    from converter.targets.coreml.mil_executor import load_program

    errors = {}
    for hw in ("cpu", "ane"):
        model, artifact = exported("resnet", hw)
        feeds = zoo.example_inputs("resnet")
        errors[hw] = float(np.abs(TARGET.run(artifact, feeds)["output"] - _reference(model, feeds)["output"]).max())
        prog = load_program(artifact.out_dir / artifact.meta["package"])
        convs = [op for op in prog.functions["main"].operations if op.op_type == "conv"]
        assert len(convs) == 9
        assert {op.weight.dtype.__name__ for op in convs} == ({"fp16"} if hw == "ane" else {"fp32"})
    assert errors["ane"] > 10 * errors["cpu"]
    assert exported("resnet", "ane")[1].meta["compute_precision"] == "fp16"
    assert exported("resnet", "cpu")[1].meta["compute_precision"] == "fp32"


def test_metadata_names_shapes_order_version_hash(exported):
    model, artifact = exported("detector", "ane")
    spec = _spec(artifact.out_dir / artifact.meta["package"])
    assert [f.name for f in spec.description.input] == ["input"]
    assert [f.name for f in spec.description.output] == ["scores", "boxes"]
    assert list(spec.description.input[0].type.multiArrayType.shape) == [1, 3, 32, 32]
    ref = _reference(model, zoo.example_inputs("detector"))
    for feature in spec.description.output:
        assert list(feature.type.multiArrayType.shape) == list(ref[feature.name].shape)
    meta = dict(spec.description.metadata.userDefined)
    assert meta["edgeconv.version"] == __version__
    assert meta["edgeconv.source_sha256"] == sha256_bytes(model.SerializeToString(deterministic=True))
    assert meta["edgeconv.compute_units"] == "CPU_AND_NE"
    assert meta["edgeconv.compute_precision"] == "fp16"
    assert meta["edgeconv.minimum_deployment_target"] == "iOS16"
    assert [o["onnx_name"] for o in json.loads(meta["edgeconv.outputs"])] == ["scores", "boxes"]
    assert json.loads(meta["edgeconv.inputs"])[0]["shape"] == [1, 3, 32, 32]
    assert "com.github.apple.coremltools.conversion_date" not in meta


@pytest.mark.parametrize("hw,units", [("cpu", "CPU_ONLY"), ("gpu", "CPU_AND_GPU"), ("ane", "CPU_AND_NE")])
def test_compute_units_per_hardware(zoo_model, tmp_path, hw, units):
    artifact = TARGET.export(zoo_model("normalized_input"), tmp_path, hw)
    assert artifact.meta["compute_units"] == units
    spec = _spec(tmp_path / artifact.meta["package"])
    assert dict(spec.description.metadata.userDefined)["edgeconv.compute_units"] == units


def test_a_port_names_the_users_file_in_the_package(zoo_onnx_path, tmp_path):
    """``port`` hands the exporter the source file's digest (report.json ``model_sha256``): the
    package's ``edgeconv.source_sha256`` names the user's model, not an intermediate ONNX."""
    from converter.infra.fsutil import sha256_file
    from converter.port import port

    path = zoo_onnx_path("detector")
    result = port(str(path), to="coreml", hw="cpu", out=tmp_path / "out", verify=False)
    assert result.status == "ok" and result.report["model_sha256"] == sha256_file(path)
    spec = _spec(tmp_path / "out" / result.report["artifact"]["meta"]["package"])
    assert dict(spec.description.metadata.userDefined)["edgeconv.source_sha256"] == sha256_file(path)


def test_reexport_is_byte_identical(zoo_model, tmp_path):
    def export(d):
        TARGET.export(zoo_model("transformer"), tmp_path / d, "ane", ExportOptions(name="m"))
        root = tmp_path / d / "m.mlpackage"
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    first, second = export("a"), export("b")
    assert first == second
    manifest = json.loads(first["Manifest.json"])
    assert manifest["rootModelIdentifier"] in manifest["itemInfoEntries"]
    # Export over an existing package replaces it whole.
    assert export("a") == first


def test_executor_runs_the_weights_in_the_file(exported, tmp_path):
    """Corrupting weight.bin changes what runs: the check executes what ships."""
    import shutil

    _, artifact = exported("resnet", "cpu")
    copy = tmp_path / "resnet.mlpackage"
    shutil.copytree(artifact.out_dir / "resnet.mlpackage", copy)
    feeds = zoo.example_inputs("resnet")
    before = TARGET.run(artifact, feeds)["output"]
    blob = copy / "Data/com.apple.CoreML/weights/weight.bin"
    data = bytearray(blob.read_bytes())
    # MIL blob storage (apple/coremltools mlmodel/src/MILBlob/Blob/StorageFormat.hpp): a 64-byte
    # header, then per blob a 64-byte metadata record (sentinel 0xDEADBEEF, dtype, sizeInBytes,
    # offset) before its data.  Overwrite the first blob's data only.
    sentinel, _, size, offset = np.frombuffer(bytes(data[64:88]), dtype="<u4,<u4,<u8,<u8")[0]
    assert sentinel == 0xDEADBEEF
    data[offset:offset + size] = np.full(size // 4, 0.5, np.float32).tobytes()
    blob.write_bytes(bytes(data))
    moved = type(artifact)(**{**artifact.__dict__, "out_dir": tmp_path})
    after = TARGET.run(moved, feeds)["output"]
    assert float(np.abs(after - before).max()) > 1e-3


def _single_op_model(node, inputs, output_shape, initializers=()):
    graph = helper.make_graph(
        [node], "single",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, output_shape)],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def _const(name, value):
    return onnx.numpy_helper.from_array(np.asarray(value), name)


SINGLE_OPS = [
    ("LeakyRelu", {}, {"alpha": 0.2}, (2, 3, 4, 5)),
    ("Elu", {}, {"alpha": 0.7}, (2, 3, 4, 5)),
    ("HardSwish", {}, {}, (2, 3, 4, 5)),
    ("HardSigmoid", {}, {"alpha": 0.3, "beta": 0.4}, (2, 3, 4, 5)),
    ("Tanh", {}, {}, (2, 3, 4, 5)),
    ("Neg", {}, {}, (2, 3, 4, 5)),
    ("Clip", {"lo": np.float32(-0.5), "hi": np.float32(0.7)}, {}, (2, 3, 4, 5)),
    ("PRelu", {"slope": np.float32([0.3])}, {}, (2, 3, 4, 5)),
    ("Softmax", {}, {"axis": 1}, (2, 3, 4, 5)),
    ("AveragePool", {}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 3, 8, 9)),
    ("GlobalMaxPool", {}, {}, (2, 3, 4, 5)),
    ("ReduceMean", {}, {"axes": [1, 3], "keepdims": 0}, (2, 3, 4, 5)),
    ("ReduceSum", {"axes": np.int64([2])}, {"keepdims": 1}, (2, 3, 4, 5)),
    ("Transpose", {}, {"perm": [0, 2, 3, 1]}, (2, 3, 4, 5)),
    ("Unsqueeze", {"axes": np.int64([0, 3])}, {}, (3, 4, 5)),
    ("Slice", {"starts": np.int64([1, -3]), "ends": np.int64([100, -1]), "axes": np.int64([1, 3]),
               "steps": np.int64([1, 2])}, {}, (2, 3, 4, 5)),
    ("Gather", {"idx": np.int64([2, 0, 2])}, {"axis": 3}, (2, 3, 4, 5)),
    ("Pad", {"pads": np.int64([0, 0, 1, 2, 0, 0, 3, 0])}, {"mode": "constant"}, (2, 3, 4, 5)),
    ("Pad", {"pads": np.int64([0, 0, 1, 2, 0, 0, 2, 1])}, {"mode": "reflect"}, (2, 3, 4, 5)),
    ("DepthToSpace", {}, {"blocksize": 2, "mode": "DCR"}, (1, 8, 3, 4)),
    ("DepthToSpace", {}, {"blocksize": 2, "mode": "CRD"}, (1, 8, 3, 4)),
    ("InstanceNormalization", {"g": np.float32([1.5, 0.5, 2.0]), "b": np.float32([0.1, -0.2, 0.3])},
     {"epsilon": 1e-5}, (2, 3, 4, 5)),
    ("BatchNormalization", {"g": np.float32([1.5, 0.5, 2.0]), "b": np.float32([0.1, -0.2, 0.3]),
                            "m": np.float32([0.2, 0.0, -0.1]), "v": np.float32([0.9, 1.3, 0.6])},
     {"epsilon": 1e-5}, (2, 3, 4, 5)),
    ("Gemm", {"w": np.linspace(-1, 1, 5 * 4, dtype=np.float32).reshape(5, 4),
              "c": np.float32([0.5, -0.5, 1.0, 0.0])}, {"alpha": 0.5, "beta": 2.0}, (3, 5)),
    ("Resize", {"roi": np.zeros(0, np.float32), "scales": np.float32([1, 1, 2, 2])},
     {"mode": "nearest"}, (1, 2, 3, 4)),
    ("Max", {"other": np.float32([0.1, -0.2, 0.3, 0.0, 0.5])}, {}, (2, 3, 4, 5)),
    ("Sum", {"other": np.float32([0.1, -0.2, 0.3, 0.0, 0.5])}, {}, (2, 3, 4, 5)),
    ("Cos", {}, {}, (2, 3, 4, 5)),
    ("Selu", {}, {}, (2, 3, 4, 5)),
    ("LogSoftmax", {}, {"axis": -1}, (2, 3, 4, 5)),
    ("Tile", {"reps": np.int64([1, 2, 1, 3])}, {}, (2, 3, 4, 5)),
    ("Expand", {"shape": np.int64([2, 3, 4, 5])}, {}, (3, 1, 5)),
    ("CumSum", {"axis": np.int64(2)}, {"exclusive": 1, "reverse": 1}, (2, 3, 4, 5)),
    ("ReduceL2", {}, {"axes": [2, 3], "keepdims": 1}, (2, 3, 4, 5)),
    ("SpaceToDepth", {}, {"blocksize": 2}, (1, 3, 4, 6)),
]


@pytest.mark.parametrize("op,consts,attrs,shape", SINGLE_OPS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SINGLE_OPS)])
def test_single_op_mappings_match_onnxruntime(tmp_path, op, consts, attrs, shape):
    node = helper.make_node(op, ["x"] + list(consts), ["y"], name=f"the_{op}", **attrs)
    model = _single_op_model(node, {"x": shape}, None, [_const(k, v) for k, v in consts.items()])
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    want = _reference(model, feeds)["y"]
    artifact = TARGET.export(model, tmp_path, "cpu", ExportOptions(name="single"))
    got = TARGET.run(artifact, feeds)["y"]
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= FP32_ATOL


def test_unmappable_op_names_node_and_op_and_writes_nothing(tmp_path):
    node = helper.make_node("Hardmax", ["x"], ["y"], name="hardmax_here")
    model = _single_op_model(node, {"x": (1, 4, 4)}, None)
    with pytest.raises(Unsupported, match=r"node 'hardmax_here' \(Hardmax\): no CoreML \(MIL\) mapping"):
        TARGET.export(model, tmp_path / "out", "cpu")
    assert not any((tmp_path / "out").rglob("*.mlpackage")) if (tmp_path / "out").exists() else True


def test_bad_hardware_and_precision_are_bad_input(zoo_model, tmp_path):
    with pytest.raises(BadInput, match="unknown CoreML hardware 'npu'"):
        TARGET.export(zoo_model("resnet"), tmp_path, "npu")
    with pytest.raises(BadInput, match="fp16 only"):
        TARGET.export(zoo_model("resnet"), tmp_path, "ane", ExportOptions(compute_precision="fp32"))
    assert not list(tmp_path.iterdir())


def test_missing_coremltools_is_missing_extra(zoo_model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "coremltools", None)
    with pytest.raises(MissingExtra, match=r"edgeconv\[coreml\]"):
        TARGET.export(zoo_model("resnet"), tmp_path, "cpu")


def test_target_import_does_not_import_coremltools():
    code = ("import sys; import converter.targets.coreml as m; "
            "assert m.TARGET.name == 'coreml' and m.TARGET.hardware == ('cpu', 'gpu', 'ane'); "
            "print('coremltools' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_export_prints_nothing(zoo_model, tmp_path, capfd):
    TARGET.export(zoo_model("normalized_input"), tmp_path, "ane")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_every_op_the_matrix_supports_for_coreml_is_mapped():
    matrix_file = ROOT / "op_support_matrix.yaml"
    if not matrix_file.exists():
        pytest.skip("op_support_matrix.yaml not in the repo yet")
    from converter.matrix import load_matrix

    matrix = load_matrix()
    supported = {op for hw in matrix.hardware("coreml") for op in matrix.ops("coreml")
                 if matrix.op_status("coreml", hw, op) == "supported"}
    missing = sorted(supported - set(supported_onnx_ops()) - {"Constant"})
    # Known gaps (reported to the lead): ops the matrix lists for coreml that the MIL builder does
    # not map yet.  A new gap, or a gap closed without updating this list, fails the test.
    assert missing == KNOWN_UNMAPPED, f"matrix-supported ops without a MIL mapping: {missing}"


KNOWN_UNMAPPED: list[str] = []  # see tests/test_coreml_matrix_coverage.py
