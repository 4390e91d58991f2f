"""MACE for the Hexagon DSP (`port --to mace --hw dsp --calibration`): the NetDef MACE's
hexagon_converter.py writes (Hexagon NN op types, min/max inputs, node ids wired by output
port, one INPUT and one OUTPUT node), run by edgeconv's reader in Hexagon NN's quantized
arithmetic.  No DSP exists here, so every such port ends `unverified` with the reader named."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_models import (assert_mace_reader_sqnr, assert_mace_reexport_identical, calibration_folder, mace_ports,
                         read_mace_netdef, two_input_add_port)

from converter.port import port
from converter.targets import get as get_target
from converter.targets.base import Artifact

DT_FLOAT, DT_UINT8, DT_INT32 = 1, 2, 4
NN_PAD_VALID, NN_PAD_SAME_CAFFE = 2, 5
#: Least SQNR (dB) of the DSP file (edgeconv's reader) against the float model on held-out
#: inputs; measured 51.0 / 49.5 dB (detector scores / boxes), 37.5 (resnet), 38.5 (mobilenetv2).
MIN_SQNR_DB = 25.0
#: Hexagon nodes whose output range is their own (out_min/out_max constants, the last two inputs).
OWN_RANGE = {"Supernode_8x8p32to8", "DepthwiseSupernode_8x8p32to8", "QuantizedAdd_8p8to8", "QuantizedSub_8p8to8",
             "QuantizedMean_8"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return calibration_folder(tmp_path_factory.mktemp("dspdata"), held=4)


@pytest.fixture(scope="module")
def ported(zoo_onnx_path, data, tmp_path_factory):
    return mace_ports(zoo_onnx_path, data, tmp_path_factory, "dsp")


_net = read_mace_netdef


def _values(net, blob):
    out = {}
    for t in net.tensors:
        dtype = {DT_FLOAT: "<f4", DT_UINT8: "u1", DT_INT32: "<i4"}[t.data_type]
        out[t.name] = np.frombuffer(blob, dtype, t.data_size, t.offset)
    return out


@pytest.mark.parametrize("name, ops", [
    # the detector's main graph (its rank-5 head runs in post-processing): ReLUs folded into the
    # convolutions, the anchor Sub with a per-channel uint8 constant
    ("detector", {"QuantizeINPUT_f_to_8": 1, "Supernode_8x8p32to8": 6, "QuantizedSigmoid_8": 1,
                  "QuantizedSub_8p8to8": 1, "DequantizeOUTPUT_8tof": 1}),
    # classifier: the Gemm is a 1x1 convolution between two Reshapes (gemm_to_conv1x1)
    ("resnet", {"QuantizeINPUT_f_to_8": 1, "Supernode_8x8p32to8": 10, "QuantizedMaxPool_8": 1,
                "QuantizedAdd_8p8to8": 3, "QuantizedRelu_8": 3, "QuantizedMean_8": 1, "QuantizedReshape": 3,
                "DequantizeOUTPUT_8tof": 1}),
    ("mobilenetv2", {"QuantizeINPUT_f_to_8": 1, "Supernode_8x8p32to8": 10, "DepthwiseSupernode_8x8p32to8": 4,
                     "QuantizedAdd_8p8to8": 3, "QuantizedMean_8": 1, "QuantizedReshape": 3,
                     "DequantizeOUTPUT_8tof": 1}),
])
def test_hexagon_netdef_as_maces_hexagon_converter_writes_it(name, ops, ported, data):
    result, out = ported(name)
    assert (result.status, result.exit_code) == ("unverified", 8), result.reason
    assert "judged by edgeconv MACE reader" in result.reason and "no DSP runtime exists here" in result.reason
    net = _net(out / f"{name}.pb")
    assert dict(Counter(op.type for op in net.op)) == ops
    assert next(a.i for a in net.arg if a.name == "runtime_type") == 3
    yml = (out / f"{name}.yml").read_text()
    assert "runtime: dsp" in yml and "quantize: 1" in yml
    tensors = {t.name: t for t in net.tensors}
    values = _values(net, (out / f"{name}.data").read_bytes())

    # node ids: constants 0..n-1 in order, then the ops; every node_input is the named input
    assert [t.node_id for t in net.tensors] == list(range(len(net.tensors)))
    assert [op.node_id for op in net.op] == list(range(len(net.tensors), len(net.tensors) + len(net.op)))
    first, last = net.op[0], net.op[-1]
    assert (first.name, list(first.input), list(first.output)) == ("mace_input_node", [], ["mace_input_node_input"])
    assert list(first.output_type) == [DT_UINT8, DT_FLOAT, DT_FLOAT]
    assert list(first.out_max_byte_size) == [3 * 32 * 32, 4, 4]
    assert not last.output and len(last.input) == 3 * len(net.output_info)
    producer = {o: (op.node_id, port) for op in net.op for port, o in enumerate(op.output)}
    for op in net.op:
        assert len(op.node_input) == len(op.input)
        for name_in, ni in zip(op.input, op.node_input):
            base, _, port = name_in.partition(":")
            if base in tensors:
                assert (ni.node_id, ni.output_port) == (tensors[base].node_id, 0) and not port
            else:  # an activation: data on port 0, its min/max on ports 1 and 2
                assert (ni.node_id, ni.output_port) == (producer[base][0], int(port or 0)), (op.name, name_in)
        if op is not first and op is not last:
            assert list(op.output_type) == [DT_UINT8, DT_FLOAT, DT_FLOAT]
            assert list(op.out_max_byte_size) == [math.prod(op.output_shape[0].dims), 4, 4]
            # every activation input's range is its producer's ports 1 and 2, every constant's
            # two float scalars <name>_min / <name>_max
            for name_in in op.input:
                if ":" in name_in or name_in.endswith(("_min", "_max")) or "/" in name_in:
                    continue
                if name_in in tensors:
                    assert f"{name_in}_min" in op.input and f"{name_in}_max" in op.input, (op.name, name_in)
                else:
                    assert f"{name_in}:1" in op.input and f"{name_in}:2" in op.input, (op.name, name_in)
    assert [n for o in net.output_info for n in (f"mace_output_node_{o.name}",) * 3] == \
        [i.partition(":")[0] for i in last.input]

    # convolutions: HWIO / HWCM uint8 filters with min/max scalars, int32 bias at x_scale * w_scale
    scale_of = {}
    for op in net.op:
        if op.type in OWN_RANGE:
            lo, hi = (float(values[n][0]) for n in op.input[-2:])
            assert op.input[-2:] == [f"{op.output[0]}_min", f"{op.output[0]}_max"]
            scale_of[op.output[0]] = (hi - lo) / 255
            assert lo <= 0 <= hi and -lo / scale_of[op.output[0]] == pytest.approx(
                round(-lo / scale_of[op.output[0]]), abs=1e-4)  # zero exactly representable
    for op in net.op:
        if "Supernode" not in op.type:
            continue
        assert len(op.input) == 12 and op.padding in (NN_PAD_VALID, NN_PAD_SAME_CAFFE)
        w, bias = tensors[op.input[1]], tensors[op.input[7]]
        kernel = list(tensors[op.input[6]].dims)
        assert w.data_type == DT_UINT8 and bias.data_type == DT_INT32
        assert op.input[4:6] == [f"{w.name}_min", f"{w.name}_max"] and op.input[8:10] == [f"{bias.name}_min",
                                                                                          f"{bias.name}_max"]
        assert float(values[op.input[4]][0]) == pytest.approx(w.minval) and w.minval <= 0 <= w.maxval
        assert tensors[op.input[6]].data_size == 0 and kernel[0] == kernel[3] == 1  # strides [1, sh, sw, 1]
        c_out = op.output_shape[0].dims[3]
        assert w.dims[3] == (c_out if op.type == "Supernode_8x8p32to8" else 1) and bias.dims == [c_out]
        w_scale = (w.maxval - w.minval) / 255
        assert bias.minval == pytest.approx(-(2**31) * bias.maxval / (2**31 - 1))
        in_range = op.input[0]
        if in_range in scale_of:  # bias scale = input scale x filter scale
            assert bias.maxval / (2**31 - 1) == pytest.approx(scale_of[in_range] * w_scale, rel=1e-6)

    # judged against the float model on the held-out inputs
    judged = result.report["quantization"]["file_verification"]
    assert judged["runtime"].startswith("edgeconv MACE reader")
    assert min(o["sqnr_db"] for o in judged["outputs"]) >= MIN_SQNR_DB
    assert_mace_reader_sqnr(result, out, "dsp", np.load(data / "held.npz")["input"][:2], MIN_SQNR_DB)


def test_hexagon_reexport_is_byte_identical(ported, tmp_path):
    _, out = ported("detector")
    assert_mace_reexport_identical(out, "detector", "dsp", True, tmp_path)


def test_concat_pool_relux_sigmoid_mean_reshape(tmp_path):
    """The Hexagon nodes the zoo models above do not use: QuantizedConcat_8 ([dim, x..., min...,
    max...]), QuantizedAvgPool_8, QuantizedReluX_8 (a Clip(0, 6) after a pool: not folded),
    QuantizedSigmoid_8, QuantizedMean_8 and a flattening QuantizedReshape, through the reader."""
    rng = np.random.default_rng(2)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(weight(8, 3, 3, 3), "w1"), numpy_helper.from_array(weight(8, 3, 3, 3), "w2"),
             numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], pads=[1, 1, 1, 1], name="ca"),
             helper.make_node("Relu", ["a0"], ["a"], name="ra"),
             helper.make_node("Conv", ["x", "w2"], ["b0"], pads=[1, 1, 1, 1], name="cb"),
             helper.make_node("Sigmoid", ["b0"], ["b"], name="sb"),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1, name="cat"),
             helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="avg"),
             helper.make_node("Clip", ["p", "lo", "hi"], ["q"], name="clip"),
             helper.make_node("GlobalAveragePool", ["q"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["y"], name="flat")]
    graph = helper.make_graph(nodes, "mix", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    path = tmp_path / "mix.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 1, 3, 8, 8)).astype(np.float32))
    np.savez(tmp_path / "held.npz", x=rng.standard_normal((4, 1, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "out"
    result = port(str(path), to="mace", hw="dsp", out=out, calibration=str(tmp_path / "calib.npz"), inputs=str(tmp_path / "held.npz"))
    assert (result.status, result.exit_code) == ("unverified", 8), result.reason
    net = _net(out / "mix.pb")
    assert [op.type for op in net.op] == [
        "QuantizeINPUT_f_to_8", "Supernode_8x8p32to8", "Supernode_8x8p32to8", "QuantizedSigmoid_8",
        "QuantizedConcat_8", "QuantizedAvgPool_8", "QuantizedReluX_8", "QuantizedMean_8", "QuantizedReshape",
        "DequantizeOUTPUT_8tof"]
    concat = net.op[4]
    a, b = concat.input[1:3]
    assert concat.input[0] == "concat_0/dim" and concat.input[3:] == [f"{a}:1", f"{b}:1", f"{a}:2", f"{b}:2"]
    assert net.op[5].padding == NN_PAD_VALID and net.op[1].padding == NN_PAD_SAME_CAFFE
    judged = result.report["quantization"]["file_verification"]  # measured 42.4 dB
    assert min(o["sqnr_db"] for o in judged["outputs"]) >= MIN_SQNR_DB


def test_op_without_hexagon_kernel_is_unsupported_naming_it(tmp_path):
    """MACE's Hexagon Reduce is Mean only: a ReduceMax has no DSP kernel and no float fallback."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("ReduceMax", ["c"], ["y"], axes=[2, 3], keepdims=1, name="peak")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "peak.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 1, 3, 8, 8)).astype(np.float32))
    result = port(str(path), to="mace", hw="dsp", out=tmp_path / "out", calibration=str(tmp_path / "calib.npz"), verify=False)
    assert (result.status, result.exit_code) == ("unsupported", 3)
    assert "Reduce 'reducemax_0': Hexagon Reduce only supports Mean" in result.reason
    assert "no float fallback" in result.reason
    assert not [f for f in result.files if f.endswith((".pb", ".data", ".yml"))]


# ------------------------------------------------------------------ the reader's Hexagon arithmetic


def _round(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _q(lo, hi):
    """Scale, and the zero point as nnlib's quantize_uint8(0, min, max) takes it (float32)."""
    f32 = np.float32
    resize = f32(f32(255) / max(f32(1e-4), f32(f32(hi) - f32(lo))))
    return (hi - lo) / 255, int(_round(float(f32(f32(0 - f32(lo)) * resize))))


def _supernode_reference(x, net, values, op, tensors):
    """Quantize input -> Supernode -> Dequantize, written with Python numbers from the Hexagon
    NN semantics (not from the reader): per-sample input range, 8x8->32 sums with the input zero
    point as padding (SAME_CAFFE: the odd pixel before), the bias re-scaled from its range, the
    sum requantized to out_min/out_max."""
    xs = x.transpose(0, 2, 3, 1).astype(np.float64)
    lo, hi = min(0.0, float(xs.min())), max(0.0, float(xs.max()))
    x_scale = (hi - lo) / 255
    x_zero = int(_round(-lo / x_scale))
    q = np.clip(np.vectorize(_round)(x_zero + xs / x_scale), 0, 255).astype(np.int64)
    w = tensors[op.input[1]]
    filt = values[op.input[1]].reshape(list(w.dims)).astype(np.int64)  # HWIO
    w_scale, w_zero = _q(w.minval, w.maxval)
    kh, kw = filt.shape[:2]
    sh, sw = list(tensors[op.input[6]].dims)[1:3]
    h, wd = q.shape[1:3]
    pads = []
    for size, k, s in ((h, kh, sh), (wd, kw, sw)):
        pad_n = max(0, ((size + s - 1) // s - 1) * s - (size - k)) if op.padding == NN_PAD_SAME_CAFFE else 0
        pads.append(((pad_n + 1) // 2, pad_n - (pad_n + 1) // 2))
    padded = np.pad(q - x_zero, [(0, 0), pads[0], pads[1], (0, 0)])
    oh, ow = (padded.shape[1] - kh) // sh + 1, (padded.shape[2] - kw) // sw + 1
    acc = np.zeros((oh, ow, filt.shape[3]), np.int64)
    for i in range(oh):
        for j in range(ow):
            acc[i, j] = np.einsum("hwc,hwco->o", padded[0, i * sh:i * sh + kh, j * sw:j * sw + kw], filt - w_zero)
    b = tensors[op.input[7]]
    b_scale = (float(values[op.input[9]][0]) - float(values[op.input[8]][0])) / 4294967295
    bias = [int(_round(float(v) * b_scale / (x_scale * w_scale))) for v in values[op.input[7]]]
    out_lo, out_hi = (float(values[n][0]) for n in op.input[10:12])
    o_scale, o_zero = _q(out_lo, out_hi)
    y = np.array([[[min(255, max(0, int(_round((acc[i, j, c] + bias[c]) * x_scale * w_scale / o_scale)) + o_zero))
                    for c in range(acc.shape[2])] for j in range(ow)] for i in range(oh)], np.float64)
    assert b.dims == [acc.shape[2]]
    return ((y - o_zero) * o_scale).astype(np.float32)[None].transpose(0, 3, 1, 2)


@pytest.mark.parametrize("group, stride, side", [(1, 2, 10), (3, 1, 9)])
def test_reader_supernode_is_hexagon_arithmetic_bit_for_bit(group, stride, side, tmp_path):
    """10x10, stride 2: nnlib pads one pixel in all, before (SAME_CAFFE), as the ONNX pads do."""
    rng = np.random.default_rng(7)
    c_out = 5 if group == 1 else 3
    w = rng.standard_normal((c_out, 3 // group, 3, 3)).astype(np.float32) * 0.4
    b = rng.standard_normal(c_out).astype(np.float32) * 0.3
    size = (side - 1) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[stride, stride], group=group,
                          name="conv")], "one_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 1, 3, side, side)).astype(np.float32))
    out = tmp_path / "out"
    result = port(str(path), to="mace", hw="dsp", out=out, calibration=str(tmp_path / "calib.npz"), verify=False)
    net = _net(out / "conv.pb")
    op_type = "Supernode_8x8p32to8" if group == 1 else "DepthwiseSupernode_8x8p32to8"
    assert [op.type for op in net.op] == ["QuantizeINPUT_f_to_8", op_type, "DequantizeOUTPUT_8tof"]
    conv = net.op[1]
    assert conv.padding == NN_PAD_SAME_CAFFE
    tensors = {t.name: t for t in net.tensors}
    values = _values(net, (out / "conv.data").read_bytes())
    if group != 1:  # HWCM [3, 3, C, 1] -> as HWIO with zeros off the diagonal for the reference
        filt = values[conv.input[1]].reshape(3, 3, 3)
        zero = _q(tensors[conv.input[1]].minval, tensors[conv.input[1]].maxval)[1]
        full = np.full((3, 3, 3, 3), zero, np.uint8)
        for c in range(3):
            full[:, :, c, c] = filt[:, :, c]
        values[conv.input[1]] = full.reshape(-1)
        tensors[conv.input[1]] = type("T", (), {"dims": [3, 3, 3, 3], "minval": tensors[conv.input[1]].minval,
                                                "maxval": tensors[conv.input[1]].maxval})()
    artifact = Artifact("mace", "dsp", [], out, result.report["artifact"]["meta"])
    for k, scale in enumerate((1.0, 0.3, 2.5)):
        x = rng.standard_normal((1, 3, side, side)).astype(np.float32) * scale
        expected = _supernode_reference(x, net, values, conv, tensors)
        got = get_target("mace").run(artifact, {"x": x})["y"]
        assert np.array_equal(got, expected), (k, np.abs(got - expected).max())


def _input_quantized(x):
    """QuantizeINPUT_f_to_8 on one input (NCHW float -> NHWC ints, scale, zero point)."""
    xs = x.transpose(0, 2, 3, 1).astype(np.float64)
    lo, hi = min(0.0, float(xs.min())), max(0.0, float(xs.max()))
    scale = (hi - lo) / 255
    zero = int(_round(-lo / scale))
    return np.clip(np.vectorize(_round)(zero + xs / scale), 0, 255).astype(np.int64), scale, zero


def test_two_inputs_share_the_input_node_and_add_bit_for_bit(tmp_path):
    """Input i is ports 3i, 3i+1, 3i+2 of the one QuantizeINPUT_f_to_8 node (add_node_id); the
    QuantizedAdd_8p8to8 sum requantized to its out_min/out_max, against Python numbers."""
    result, out, rng = two_input_add_port(tmp_path, "dsp")
    net = _net(out / "add.pb")
    node, add, last = net.op
    assert (node.type, list(node.output)) == ("QuantizeINPUT_f_to_8", ["mace_input_node_a", "mace_input_node_c"])
    assert [(i.node_id, i.output_port) for i in add.node_input][:6] == [
        (node.node_id, 0), (node.node_id, 3), (node.node_id, 1), (node.node_id, 2), (node.node_id, 4),
        (node.node_id, 5)]
    assert (last.type, last.name, list(last.input)) == (
        "DequantizeOUTPUT_8tof", "y", ["mace_output_node_y", "mace_output_node_y:1", "mace_output_node_y:2"])
    values = _values(net, (out / "add.data").read_bytes())
    o_scale, o_zero = _q(*(float(values[n][0]) for n in add.input[6:8]))
    artifact = Artifact("mace", "dsp", [], out, result.report["artifact"]["meta"])
    for k in range(3):
        a, c = ((rng.standard_normal((1, 4, 5, 5)) * s).astype(np.float32) for s in (1.0, 2.0 + k))
        (qa, sa, za), (qc, sc, zc) = _input_quantized(a), _input_quantized(c)
        real = (qa - za) * sa + (qc - zc) * sc
        y = np.clip(np.vectorize(_round)(real / o_scale) + o_zero, 0, 255)
        expected = ((y - o_zero) * o_scale).astype(np.float32).transpose(0, 3, 1, 2)
        got = get_target("mace").run(artifact, {"a": a, "c": c})["y"]
        assert np.array_equal(got, expected), (k, np.abs(got - expected).max())
