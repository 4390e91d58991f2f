"""Localization inside the target stage: a fault planted in an exported file is named exactly.

Each fault flips the sign of one convolution's weights *inside the written file*.  The bytes are
located by content, not through our writers: the legalized model's weight array, encoded the way
the format stores a convolution filter, must occur exactly once in the file:

* TFLite: CONV_2D filter [out, kh, kw, in] float32 (tensorflow/lite/kernels/conv.cc, "filter"
  is OHWI), in a flatbuffer ``Buffer.data`` vector;
* TNN: the Convolution resource's filter RawBuffer, OIHW float32
  (source/tnn/interpreter/tnn/layer_interpreter/conv_layer_interpreter.cc);
* MACE: the filter ConstTensor's bytes in ``.data``, OIHW (the NetDef's filter_format arg);
* CoreML: the conv ``weight`` blob in ``weights/weight.bin``, OIHW fp32 (MIL conv spec, fp32
  program for --hw cpu).

Verification must then name that convolution (legalized-ONNX tensor and op type) and the target
layer type that computed it, at two depths per target, while every layer of a clean export stays
within normalized rMSE 1e-5 of the legalized model.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from converter.ir.graph import constant_value, to_graph
from converter.legalize.apply import legalize
from converter.targets import get as get_target
from converter.targets.base import Artifact, ExportOptions, supports_intermediates
from converter.verify import Stage, verify_port, verify_stages
from converter.runtimes.feeds import random_inputs
from converter.verify.report import html_section, layer_table, to_json
from converter.verify.target_layers import NOT_MATERIALIZED, TargetLocalizer, localize_target

HW = {"tflite": "cpu", "tnn": "arm", "mace": "cpu", "coreml": "cpu"}
LAYER_TYPE = {"tflite": "CONV_2D", "tnn": "Convolution", "mace": "Conv2D", "coreml": "conv"}
#: Tensors the TFLite file does not keep: ReLU fused into CONV_2D / ADD (fuse.py).
TFLITE_FUSED = {"conv_0_1", "conv_1_1", "conv_3_1", "conv_6_1", "add_0_1", "add_1_1", "add_2_1",
                "globalaveragepool_0_1"}  # GlobalAveragePool + Flatten: one MEAN without keep-dims
#: A shallow and a deep convolution of the zoo ResNet whose outputs every target keeps.
FAULTS = [("conv_2", "conv_2_1"), ("conv_8", "conv_8_1")]


@pytest.fixture(scope="module")
def resnet(zoo_model):
    return zoo_model("resnet")


@pytest.fixture(scope="module")
def sample(resnet):
    return random_inputs(resnet, seed=0)[0]


@pytest.fixture(scope="module")
def exported(resnet, tmp_path_factory):
    """``exported(fw) -> (legalized model, artifact)``, exported once per module."""
    cache = {}

    def get(fw: str):
        if fw not in cache:
            legalized = legalize(resnet, fw, HW[fw]).model
            out = tmp_path_factory.mktemp(f"clean-{fw}")
            artifact = get_target(fw).export(legalized, out, HW[fw], ExportOptions(name="resnet"))
            cache[fw] = (legalized, artifact)
        return cache[fw]

    return get


def _copy(artifact: Artifact, out_dir: Path) -> Artifact:
    shutil.copytree(artifact.out_dir, out_dir)
    files = [out_dir / Path(f).relative_to(artifact.out_dir) for f in artifact.files]
    return Artifact(artifact.target, artifact.hw, files, out_dir, copy.deepcopy(artifact.meta), artifact.runtime)


def _stored_filter(fw: str, weights: np.ndarray) -> np.ndarray:
    return weights.transpose(0, 2, 3, 1) if fw == "tflite" else weights  # OHWI vs OIHW


def _weight_file(fw: str, artifact: Artifact) -> Path:
    suffix = {"tflite": ".tflite", "tnn": ".tnnmodel", "mace": ".data", "coreml": "weight.bin"}[fw]
    return next(Path(f) for f in artifact.files if str(f).endswith(suffix))


def flip_conv_weights(fw: str, legalized: onnx.ModelProto, artifact: Artifact, node: str) -> int:
    """Negate ``node``'s filter where the file stores it; returns the byte offset."""
    conv = next(n for n in to_graph(legalized).nodes if n.name == node)
    weights = np.asarray(constant_value(conv.inputs[1]), np.float32)
    stored = np.ascontiguousarray(_stored_filter(fw, weights)).astype("<f4")
    path = _weight_file(fw, artifact)
    data = bytearray(path.read_bytes())
    needle = stored.tobytes()
    offset = data.find(needle)
    assert offset >= 0 and data.find(needle, offset + 1) < 0, f"{node}'s filter must occur once in {path.name}"
    data[offset:offset + len(needle)] = (-stored).tobytes()
    path.write_bytes(bytes(data))
    return offset


@pytest.mark.parametrize("fw", list(HW))
def test_every_layer_of_a_clean_export_matches(fw, exported, sample):
    legalized, artifact = exported(fw)
    target = get_target(fw)
    assert supports_intermediates(target)
    report = localize_target(legalized, target, artifact, sample)
    assert report.error is None and report.first is None and report.target == fw
    assert max(layer.rmse for layer in report.layers) < 1e-5
    compared = {layer.tensor for layer in report.layers}
    all_tensors = {o for n in legalized.graph.node for o in n.output}
    if fw == "tflite":
        assert len(report.layers) == 15 and compared == all_tensors - TFLITE_FUSED
        assert report.skipped == {t: NOT_MATERIALIZED for t in TFLITE_FUSED}
        relu = next(layer for layer in report.layers if layer.tensor == "relu_1_1")
        assert (relu.candidate_op, relu.also_computes, relu.by) == ("CONV_2D", ["conv_1"], "tflite Conv+Relu -> CONV_2D")
    else:
        assert len(report.layers) == len(legalized.graph.node) == 23 and compared == all_tensors
        assert report.skipped == {}
    conv = next(layer for layer in report.layers if layer.tensor == "conv_8_1")
    assert (conv.op, conv.candidate_op, conv.by) == ("Conv", LAYER_TYPE[fw], f"{fw} Conv -> {LAYER_TYPE[fw]}")
    assert report.candidate_nodes == {"tflite": 18, "tnn": 23, "mace": 23, "coreml": 23}[fw]


@pytest.mark.parametrize("fw", list(HW))
@pytest.mark.parametrize("node, tensor", FAULTS)
def test_fault_in_the_file_is_named(fw, node, tensor, exported, resnet, sample, tmp_path):
    legalized, clean = exported(fw)
    artifact = _copy(clean, tmp_path / "faulty")
    flip_conv_weights(fw, legalized, artifact, node)
    target = get_target(fw)

    report = verify_port(resnet, resnet, legalized, target=target, artifact=artifact, inputs=[sample])
    failed = report.first_failure
    assert failed is not None and failed.name == f"target:{fw}", report.summary()
    assert [s.status for s in report.stages] == ["pass", "pass", "fail"]
    layers = failed.layers
    assert layers is not None and layers.error is None and layers.target == fw
    first = layers.first
    assert (first.tensor, first.node, first.op) == (tensor, node, "Conv")
    assert first.candidate_op == LAYER_TYPE[fw] and first.by == f"{fw} Conv -> {LAYER_TYPE[fw]}"
    assert first.rmse > 0.05  # a sign flip is far above the 1e-3 layer tolerance
    assert all(layer.rmse < 1e-5 for layer in layers.layers[:first.index])
    assert first.index > 0

    summary = report.summary()
    assert f"first diverging layer in the {fw} file: {node} (Conv) -> tensor {tensor}" in summary
    assert f"{fw} Conv -> {LAYER_TYPE[fw]}" in summary
    data = json.loads(json.dumps(to_json(report), allow_nan=False))
    first_json = data["stages"][2]["layers"]["first_diverging"]
    assert (first_json["tensor"], first_json["op"], first_json["candidate_op"]) == (tensor, "Conv", LAYER_TYPE[fw])
    page = html_section(report)
    assert f"first: {node} (Conv -&gt; {fw} {LAYER_TYPE[fw]})" in page
    assert f"per-layer normalized rMSE of the {fw} file against the legalized model" in page


def test_fused_activation_names_the_fused_layer(exported, resnet, sample, tmp_path):
    """TFLite fuses conv_1's ReLU into its CONV_2D: the first tensor the file has is relu_1_1,
    and the report says that CONV_2D also computes conv_1."""
    legalized, clean = exported("tflite")
    artifact = _copy(clean, tmp_path / "faulty")
    flip_conv_weights("tflite", legalized, artifact, "conv_1")
    report = verify_port(resnet, resnet, legalized, target=get_target("tflite"), artifact=artifact, inputs=[sample])
    first = report.first_failure.layers.first
    assert (first.tensor, first.op, first.candidate_op) == ("relu_1_1", "Relu", "CONV_2D")
    assert first.also_computes == ["conv_1"] and first.by == "tflite Conv+Relu -> CONV_2D"
    assert "which also computes conv_1" in report.summary()

    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(layer_table(report.first_failure))
    text = console.export_text()
    assert "tflite layer" in text and "op 3 (CONV_2D)" in text


def test_deterministic_tensor_maps(exported, resnet, tmp_path):
    """The recorded maps are part of the export: identical on a re-export, files byte-identical."""
    for fw in ("tflite", "tnn", "mace"):
        legalized, first = exported(fw)
        again = get_target(fw).export(legalized, tmp_path / fw, HW[fw], ExportOptions(name="resnet"))
        assert again.meta == first.meta
        for a, b in zip(first.files, again.files):
            assert Path(a).read_bytes() == Path(b).read_bytes()


class _OutputsOnly:
    """A target implementing only the required interface (no ``intermediates``)."""

    name = "outputs_only"

    def __init__(self, model):
        from converter.verify import onnx_runner

        self._run = onnx_runner(model)

    def run(self, artifact, inputs):
        return {k: v + 1.0 for k, v in self._run(inputs).items()}


def test_target_without_intermediates_is_compared_at_outputs_only(resnet, sample):
    target = _OutputsOnly(resnet)
    assert not supports_intermediates(target)
    report = verify_port(resnet, resnet, resnet, target=target, artifact=object(), inputs=[sample])
    failed = report.first_failure
    assert failed.name == "target:outputs_only" and failed.layers is None
    assert "elements beyond atol" in failed.reason


def test_failing_intermediates_is_one_line_error(exported, resnet, sample, tmp_path):
    legalized, clean = exported("tnn")
    artifact = _copy(clean, tmp_path / "broken")
    _weight_file("tnn", artifact).write_bytes(b"\x00\x01")  # truncated .tnnmodel
    localizer = TargetLocalizer(get_target("tnn"), artifact, legalized)
    report = verify_stages(resnet, [Stage("target:tnn", lambda x: {"output": np.zeros((1, 10), np.float32)},
                                          localizer=localizer)], [sample])
    layers = report.first_failure.layers
    assert layers.error and "\n" not in layers.error and layers.layers == []
    assert "per-layer comparison failed" in report.summary()


def test_fp16_coreml_program_maps_its_cast_fp16_vars(resnet, sample, tmp_path):
    """--hw ane computes in fp16: coremltools renames every op output ``<name>_cast_fp16``.
    All 23 layers still map, and fp16 rounding stays below the layer tolerance (no false blame)."""
    legalized = legalize(resnet, "coreml", "ane").model
    artifact = get_target("coreml").export(legalized, tmp_path, "ane", ExportOptions(name="resnet"))
    report = localize_target(legalized, get_target("coreml"), artifact, sample)
    assert len(report.layers) == 23 and report.first is None
    assert all(layer.candidate_tensor == f"{layer.tensor}_cast_fp16" for layer in report.layers)
    worst = max(layer.rmse for layer in report.layers)
    assert 1e-6 < worst < 1e-3  # fp16 really ran, and stayed within the tolerance


def test_tflite_layouts_are_undone_through_transposes(zoo_model, tmp_path):
    """The zoo transformer's heads are stored in permuted layouts (relabelled Transposes share
    one TFLite tensor): each is transposed back and matches the legalized ONNX tensor."""
    model = zoo_model("transformer")
    legalized = legalize(model, "tflite", "cpu").model
    artifact = get_target("tflite").export(legalized, tmp_path, "cpu", ExportOptions())
    perms = {tuple(e["perm"]) for e in artifact.meta["tensor_map"].values()}
    assert {(1, 3, 0, 2, 4), (0, 2, 1, 3)} <= perms
    report = localize_target(legalized, get_target("tflite"), artifact, random_inputs(legalized, seed=1)[0])
    assert report.error is None and len(report.layers) == 24
    assert max(layer.rmse for layer in report.layers) < 1e-5
    permuted = [layer for layer in report.layers
                if tuple(artifact.meta["tensor_map"][layer.tensor]["perm"]) == (1, 3, 0, 2, 4)]
    assert len(permuted) == 4
