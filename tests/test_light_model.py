"""converter/ir/light_model.py: shape inference, checks and onnxruntime sessions that do not
serialize the weights give exactly what the weight-serializing calls give."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from converter.demo import zoo
from converter.ir import light_model
from converter.runtimes.onnxruntime import run_session, session


@pytest.mark.parametrize("name", ["resnet", "transformer", "detector"])
def test_infer_shapes_equals_onnx_byte_for_byte(name, zoo_onnx_path):
    model = onnx.load(str(zoo_onnx_path(name)))
    light, added = light_model.light_copy(model)
    assert added and len(light.graph.initializer) < len(model.graph.initializer)  # weights were moved
    for kwargs in ({"data_prop": True}, {"check_type": False, "strict_mode": False, "data_prop": True}):
        expected = onnx.shape_inference.infer_shapes(model, **kwargs)
        got = light_model.infer_shapes(model, **kwargs)
        assert got.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)


def test_check_structure_still_rejects_a_broken_graph(zoo_onnx_path):
    model = onnx.load(str(zoo_onnx_path("resnet")))
    light_model.check_structure(model)
    model.graph.node[1].input[0] = "no_such_tensor"
    with pytest.raises(onnx.checker.ValidationError):
        light_model.check_structure(model)


def test_session_with_in_memory_weights_equals_serialized_session(zoo_onnx_path):
    model = onnx.load(str(zoo_onnx_path("resnet")))
    serialized, arrays = light_model.without_weight_bytes(model)
    assert arrays and len(serialized) < model.ByteSize() // 4
    feeds = zoo.example_inputs("resnet")
    got = run_session(session(model), feeds)
    expected = run_session(session(model.SerializeToString()), feeds)
    assert list(got) == list(expected)
    for name in got:
        assert np.array_equal(got[name], expected[name])


def test_opset_conversion_on_the_light_copy_equals_onnx(tmp_path):
    from converter.ir.graph import CANONICAL_OPSET

    path = zoo.export_onnx("transformer", tmp_path / "t13.onnx", opset=13)  # Squeeze/Unsqueeze/ReduceMean axes change
    model = onnx.load(str(path))
    expected = onnx.version_converter.convert_version(model, CANONICAL_OPSET)
    got = light_model.on_light_copy(model, lambda light: onnx.version_converter.convert_version(light, CANONICAL_OPSET))
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
