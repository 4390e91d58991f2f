"""Softmax and reductions over a short innermost axis run where the axis is strided
(``layout.strided_layout``, thresholds measured by benchmarks/bench_short_axis.py): exact op
lists and stored shapes, LiteRT vs onnxruntime, and the cases the rule must leave alone (int8
files and other hardware among them)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from converter.targets.tflite import TARGET
from tflite_helpers import export, feeds_for, make_model, max_error, reference, roundtrip

RNG = np.random.default_rng(5)


def _w(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def ops_with_shapes(path) -> list[tuple[str, tuple[int, ...]]]:
    """(builtin, stored shape of its first output) per op, as LiteRT reads the file."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    shapes = {t["index"]: tuple(int(d) for d in t["shape"]) for t in interp.get_tensor_details()}
    return [(op["op_name"], shapes[op["outputs"][0]]) for op in interp._get_ops_details()]  # noqa: SLF001


def _detection_head(classes=5, anchors=4, size=16, max_subtracted=True):
    """Conv -> [n, anchors, classes, h, w] -> (x - max x) -> Softmax(classes) * Sigmoid(Conv):
    the zoo detector's head, the classes innermost once the convolution's NHWC output is split."""
    nodes = [node("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1]),
             node("Reshape", ["c", "s5"], ["logits"])]
    if max_subtracted:
        nodes += [node("ReduceMax", ["logits"], ["m"], axes=[2], keepdims=1), node("Sub", ["logits", "m"], ["z"])]
    nodes += [node("Softmax", ["z" if max_subtracted else "logits"], ["p"], axis=2),
              node("Conv", ["x", "wo"], ["o"], pads=[1, 1, 1, 1]), node("Sigmoid", ["o"], ["so"]),
              node("Reshape", ["so", "s1"], ["obj"]), node("Mul", ["p", "obj"], ["y"])]
    inits = {"wc": _w(anchors * classes, 8, 3, 3), "bc": _w(anchors * classes), "wo": _w(anchors, 8, 3, 3),
             "s5": np.array([1, anchors, classes, size, size], np.int64),
             "s1": np.array([1, anchors, 1, size, size], np.int64)}
    return make_model(nodes, {"x": (1, 8, size, size)}, inits)


def test_detection_head_reduces_classes_in_onnx_order(tmp_path):
    """The logits go to ONNX order once (classes strided, 256-wide rows); the model's own max
    subtraction makes the softmax's redundant (exact); `y` needs no TRANSPOSE at the output."""
    art, err = roundtrip(_detection_head(), tmp_path)
    assert err <= 1e-6, err
    assert ops_with_shapes(art.files[0]) == [
        ("CONV_2D", (1, 16, 16, 20)), ("CONV_2D", (1, 16, 16, 4)), ("RESHAPE", (1, 16, 16, 4, 5)),
        ("LOGISTIC", (1, 16, 16, 4)), ("TRANSPOSE", (1, 4, 5, 16, 16)), ("REDUCE_MAX", (1, 4, 1, 16, 16)),
        ("RESHAPE", (1, 16, 16, 4, 1)), ("SUB", (1, 4, 5, 16, 16)), ("EXP", (1, 4, 5, 16, 16)),
        ("SUM", (1, 4, 1, 16, 16)), ("DIV", (1, 4, 5, 16, 16)), ("TRANSPOSE", (1, 4, 1, 16, 16)),
        ("MUL", (1, 4, 5, 16, 16))]


def test_softmax_without_max_subtraction_keeps_its_own(tmp_path):
    """Logits up to ~+-200: without the REDUCE_MAX + SUB, EXP would overflow to inf."""
    model = _detection_head(max_subtracted=False)
    for init in model.graph.initializer:
        if init.name == "wc":
            init.CopyFrom(helper.make_tensor("wc", init.data_type, init.dims,
                                             (np.frombuffer(init.raw_data, np.float32) * 300).tolist()))
    art = export(model, tmp_path)
    feeds = feeds_for(model)
    ref, got = reference(model, feeds), TARGET.run(art, feeds)
    # (the logits' own conv rounding, ~1e-5 of 200, is what moves the probabilities by ~1e-5)
    assert np.abs(ref["y"]).max() > 0.5 and max_error(ref, got) <= 1e-4
    head = [op for op, _ in ops_with_shapes(art.files[0]) if op not in ("CONV_2D", "LOGISTIC", "RESHAPE")]
    assert head == ["TRANSPOSE", "REDUCE_MAX", "SUB", "EXP", "SUM", "DIV", "TRANSPOSE", "MUL"]


def test_zoo_detector_head(zoo_model, tmp_path):
    art = export(zoo_model("detector"), tmp_path, "detector")
    ops = [op for op, _ in ops_with_shapes(art.files[0])]
    assert ops[ops.index("TRANSPOSE"):] == ["TRANSPOSE", "REDUCE_MAX", "SUB", "EXP", "SUM", "DIV", "TRANSPOSE", "MUL"]
    assert "SOFTMAX" not in ops and len(ops) == 19
    feeds = feeds_for(zoo_model("detector"))
    assert max_error(reference(zoo_model("detector"), feeds), TARGET.run(art, feeds)) <= 1e-5


def test_softmax_over_a_short_last_axis_moves_it_outermost(tmp_path):
    """[1, 256, 5] softmax over the last axis (innermost in ONNX order too): the axis goes
    outermost, [5, 1, 256], and the result back, two TRANSPOSEs that still pay (0.16x at K=5)."""
    art, err = roundtrip(make_model([node("Softmax", ["x"], axis=-1)], {"x": (1, 256, 5)}), tmp_path)
    assert err <= 1e-6, err
    assert ops_with_shapes(art.files[0]) == [
        ("TRANSPOSE", (5, 1, 256)), ("REDUCE_MAX", (1, 1, 256)), ("SUB", (5, 1, 256)), ("EXP", (5, 1, 256)),
        ("SUM", (1, 1, 256)), ("DIV", (5, 1, 256)), ("TRANSPOSE", (1, 256, 5))]


def test_short_channel_mean_comes_back_by_reshape(tmp_path):
    """Mean over 3 NHWC channels, then x - mean and a Conv: the mean is taken in NCHW, comes back
    to NHWC by a RESHAPE (only the reduced unit axis moves), and x stays NHWC for the Sub and
    the Conv (no TRANSPOSE back)."""
    nodes = [node("Conv", ["x", "w0"], ["h"]), node("ReduceMean", ["h"], ["m"], axes=[1], keepdims=1),
             node("Sub", ["h", "m"], ["d"]), node("Conv", ["d", "w1"])]
    art, err = roundtrip(make_model(nodes, {"x": (1, 3, 16, 16)}, {"w0": _w(3, 3, 1, 1), "w1": _w(4, 3, 1, 1)}),
                         tmp_path)
    assert err <= 1e-6, err
    assert ops_with_shapes(art.files[0]) == [
        ("CONV_2D", (1, 16, 16, 3)), ("TRANSPOSE", (1, 3, 16, 16)), ("MEAN", (1, 1, 16, 16)),
        ("RESHAPE", (1, 16, 16, 1)), ("SUB", (1, 16, 16, 3)), ("CONV_2D", (1, 16, 16, 4))]


@pytest.mark.parametrize("keepdims, expected", [
    (0, [("CONV_2D", (1, 16, 16, 4)), ("TRANSPOSE", (1, 4, 16, 16)), ("REDUCE_MAX", (1, 16, 16))]),
    (1, [("CONV_2D", (1, 16, 16, 4)), ("TRANSPOSE", (1, 4, 16, 16)), ("REDUCE_MAX", (1, 1, 16, 16)),
         ("RESHAPE", (1, 16, 16, 1))])])
def test_short_channel_reduction_as_output(tmp_path, keepdims, expected):
    """A rank-4 result is handed out NHWC, as without the rule (here by a RESHAPE)."""
    nodes = [node("Conv", ["x", "w"], ["h"]), node("ReduceMax", ["h"], axes=[1], keepdims=keepdims)]
    art, err = roundtrip(make_model(nodes, {"x": (1, 4, 16, 16)}, {"w": _w(4, 4, 1, 1)}), tmp_path)
    assert err <= 1e-6, err
    assert ops_with_shapes(art.files[0]) == expected
    assert art.meta["outputs"][0]["layout"] == ("NHWC" if keepdims else "as-onnx")


def test_channel_softmax_output_stays_nhwc(tmp_path):
    """A segmentation-style softmax over 4 NHWC channels as the graph output: computed in NCHW
    (strided channels), handed out NHWC as before the rule (the measured strided form pays this
    TRANSPOSE back too)."""
    nodes = [node("Conv", ["x", "w"], ["h"]), node("Softmax", ["h"], axis=1)]
    art, err = roundtrip(make_model(nodes, {"x": (1, 4, 16, 16)}, {"w": _w(4, 4, 1, 1)}), tmp_path)
    assert err <= 1e-6, err
    assert ops_with_shapes(art.files[0]) == [
        ("CONV_2D", (1, 16, 16, 4)), ("TRANSPOSE", (1, 4, 16, 16)), ("REDUCE_MAX", (1, 1, 16, 16)),
        ("SUB", (1, 4, 16, 16)), ("EXP", (1, 4, 16, 16)), ("SUM", (1, 1, 16, 16)), ("DIV", (1, 4, 16, 16)),
        ("TRANSPOSE", (1, 16, 16, 4))]
    assert art.meta["outputs"][0]["layout"] == "NHWC"


def test_short_last_axis_sum_goes_outermost(tmp_path):
    art, err = roundtrip(make_model([node("ReduceSum", ["x", "ax"], keepdims=0)], {"x": (2, 64, 3)},
                                    {"ax": np.array([-1], np.int64)}), tmp_path)
    assert err <= 1e-5, err
    assert ops_with_shapes(art.files[0]) == [("TRANSPOSE", (3, 2, 64)), ("SUM", (2, 64))]


@pytest.mark.parametrize("case", ["long_axis", "few_rows", "reduce_16", "log_softmax", "multi_axis", "strided_already"])
def test_where_the_rule_does_not_apply(tmp_path, case):
    """64 classes (SOFTMAX is faster: 1.31x), 16 rows (0.94x), a lone reduction over 16 (SUM
    1.04x), LogSoftmax (not decomposed), a reduction over two axes, a short axis not innermost."""
    inputs, expected = {"x": (1, 4, 8, 8)}, None
    front = [node("Conv", ["x", "w"], ["h"])]
    inits = {"w": _w(4, 4, 1, 1)}
    if case == "long_axis":
        inputs, inits["w"] = {"x": (1, 64, 8, 8)}, _w(64, 64, 1, 1)
        nodes, expected = front + [node("Softmax", ["h"], axis=1)], ["CONV_2D", "SOFTMAX"]
    elif case == "few_rows":
        inputs = {"x": (1, 4, 4, 4)}
        nodes, expected = front + [node("Softmax", ["h"], axis=1)], ["CONV_2D", "SOFTMAX"]
    elif case == "reduce_16":
        inputs, inits["w"] = {"x": (1, 16, 8, 8)}, _w(16, 16, 1, 1)
        nodes, expected = front + [node("ReduceSum", ["h", "ax"], axes=None, keepdims=1)], ["CONV_2D", "SUM"]
        inits["ax"] = np.array([1], np.int64)
    elif case == "log_softmax":
        nodes, expected = front + [node("LogSoftmax", ["h"], axis=1)], ["CONV_2D", "LOG_SOFTMAX"]
    elif case == "multi_axis":
        nodes, expected = front + [node("ReduceMax", ["h"], axes=[1, 3], keepdims=1)], ["CONV_2D", "REDUCE_MAX"]
    else:  # the 4 channels are strided in ONNX order already: reduced in place, no TRANSPOSE
        nodes, expected = [node("ReduceMax", ["x"], axes=[1], keepdims=1)], ["REDUCE_MAX"]
    art, err = roundtrip(make_model(nodes, inputs, inits), tmp_path)
    assert err <= 1e-5, err
    assert [op for op, _ in ops_with_shapes(art.files[0])] == expected


@pytest.mark.parametrize("hw", ["gpu", "nnapi"])
def test_other_hardware_keeps_softmax(tmp_path, hw):
    """Measured on the CPU path only; the GPU delegate keeps channels in slices of 4."""
    from converter.targets.base import ExportOptions

    model = _detection_head()
    art = TARGET.export(model, tmp_path, hw, ExportOptions(name="m"))
    ops = [op for op, _ in ops_with_shapes(art.files[0])]
    assert "SOFTMAX" in ops and "EXP" not in ops
    feeds = feeds_for(model)
    assert max_error(reference(model, feeds), TARGET.run(art, feeds)) <= 1e-6


def test_int8_files_keep_softmax(tmp_path):
    """The int8 pass writes SOFTMAX as one int8 op; EXP has no int8 kernel (it would stay a float
    island): the rule is for float files only."""
    import onnx

    from converter.port import port

    nodes = [node("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1]), node("Reshape", ["c", "s5"], ["logits"]),
             node("Softmax", ["logits"], axis=2)]
    inits = {"wc": _w(20, 8, 3, 3), "bc": _w(20), "s5": np.array([1, 4, 5, 16, 16], np.int64)}
    onnx.save(make_model(nodes, {"x": (1, 8, 16, 16)}, inits), str(tmp_path / "head.onnx"))
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((16, 1, 8, 16, 16)).astype(np.float32))
    result = port(str(tmp_path / "head.onnx"), to="tflite", hw="cpu", out=tmp_path / "out", quantize="int8", calibration=str(tmp_path / "c.npz"))
    assert result.status == "ok", result.reason
    meta = result.report["artifact"]["meta"]
    assert meta["ops"].get("SOFTMAX") == 1 and "EXP" not in meta["ops"] and meta["int8"]["float_ops"] == []
