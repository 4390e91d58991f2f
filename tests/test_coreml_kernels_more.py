"""The numpy MIL kernels in kernels_vision.py / kernels_tensor.py against onnxruntime on the
equivalent ONNX op, with MIL arguments written out by hand from the MIL op specs (independent of
the ONNX->MIL builder)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from converter.targets.coreml.kernels import KERNELS


def _ort(op_type, inputs: dict, initializers: dict = None, n_out=1, **attrs):
    initializers = initializers or {}
    names = list(inputs) + list(initializers)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "k",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        initializer=[onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, inputs)
    return got if n_out > 1 else got[0]


def _f(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got, want, atol=1e-5):
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= atol


@pytest.mark.parametrize("ctm,mode,size", [("half_pixel", "UNALIGN_CORNERS", (7, 11)),
                                           ("align_corners", "STRICT_ALIGN_CORNERS", (3, 9)),
                                           ("asymmetric", "DEFAULT", (8, 4))])
def test_resize_bilinear_matches_onnx_linear_resize(ctm, mode, size):
    x = _f((2, 3, 5, 6), 1)
    want = _ort("Resize", {"x": x}, {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                                     "sizes": np.array([2, 3, *size], np.int64)},
                mode="linear", coordinate_transformation_mode=ctm)
    got = KERNELS["resize_bilinear"](None, dict(x=x, target_size_height=size[0], target_size_width=size[1],
                                                sampling_mode=mode))
    _close(got, want)


@pytest.mark.parametrize("onnx_padding,align,mil_padding,mode", [
    ("zeros", 0, "constant", "bilinear"), ("zeros", 1, "constant", "bilinear"), ("border", 0, "border", "bilinear"),
    ("reflection", 1, "reflection", "bilinear"), ("reflection", 0, "symmetric", "bilinear"),
    ("border", 1, "border", "nearest")])
def test_resample_matches_onnx_grid_sample(onnx_padding, align, mil_padding, mode):
    x = _f((2, 3, 5, 6), 2)
    grid = np.random.default_rng(3).uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)
    want = _ort("GridSample", {"x": x, "g": grid}, align_corners=align, padding_mode=onnx_padding, mode=mode)
    got = KERNELS["resample"](None, dict(x=x, coordinates=grid, sampling_mode=mode, padding_mode=mil_padding,
                                         padding_value=np.float32(0), coordinates_mode="normalized_minus_one_to_one",
                                         align_corners=bool(align)))
    _close(got, want)


def test_crop_resize_whole_image_is_align_corners_resize():
    x = _f((2, 3, 5, 6), 4)
    want = _ort("Resize", {"x": x}, {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                                     "sizes": np.array([2, 3, 4, 9], np.int64)},
                mode="linear", coordinate_transformation_mode="align_corners")
    roi = np.array([0, 0, 4, 5], np.float32).reshape(1, 1, 4, 1, 1)  # CORNERS_HEIGHT_FIRST, pixels
    got = KERNELS["crop_resize"](None, dict(x=x, roi=roi, target_height=4, target_width=9,
                                            normalized_coordinates=False, sampling_mode="ALIGN_CORNERS"))
    _close(got[0], want)


def test_crop_resize_samples_roi_align_points_with_batch_index():
    """RoiAlign with sampling_ratio=1 samples bin centers start + (j + 0.5) * size / n."""
    x = _f((2, 3, 8, 10), 5)
    rois = np.array([[0.5, 1.0, 4.0, 3.5], [2.0, 0.2, 5.5, 6.0]], np.float32)  # x1, y1, x2, y2
    want = _ort("RoiAlign", {"x": x, "rois": rois}, {"bi": np.array([1, 0], np.int64)},
                output_height=3, output_width=4, sampling_ratio=1, coordinate_transformation_mode="output_half_pixel")
    boxes = []
    for (x1, y1, x2, y2), b in zip(rois, (1, 0)):
        hy, hx = (y2 - y1) / 6, (x2 - x1) / 8
        boxes.append([b, y1 + hy, x1 + hx, y2 - hy, x2 - hx])
    roi = np.array(boxes, np.float32).reshape(2, 1, 5, 1, 1)
    got = KERNELS["crop_resize"](None, dict(x=x, roi=roi, target_height=3, target_width=4,
                                            box_coordinate_mode="CORNERS_HEIGHT_FIRST", sampling_mode="ALIGN_CORNERS"))
    _close(got[:, 0], want)


def test_non_maximum_suppression_matches_onnx_single_class():
    rng = np.random.default_rng(6)
    centers, sizes = rng.uniform(0, 10, (1, 15, 2)), rng.uniform(1, 5, (1, 15, 2))
    boxes = np.concatenate([centers, sizes], -1).astype(np.float32)  # x, y, w, h
    scores = rng.uniform(0, 1, (1, 1, 15)).astype(np.float32)
    want = _ort("NonMaxSuppression", {"b": boxes, "s": scores},
                {"m": np.array([6], np.int64), "iou": np.float32([0.3]), "st": np.float32([0.25])},
                center_point_box=1)
    _, _, indices, count = KERNELS["non_maximum_suppression"](None, dict(
        boxes=boxes, scores=scores.transpose(0, 2, 1), iou_threshold=np.float32(0.3),
        score_threshold=np.nextafter(np.float32(0.25), np.float32(1)), max_boxes=6))
    assert count[0] == len(want) and (indices[0, count[0]:] == -1).all()
    np.testing.assert_array_equal(indices[0, :count[0]], want[:, 2])


def test_local_response_norm_matches_onnx_lrn():
    x = _f((2, 7, 3, 4), 7)
    want = _ort("LRN", {"x": x}, size=5, alpha=0.03, beta=0.7, bias=1.2)
    got = KERNELS["local_response_norm"](None, dict(x=x, size=5, alpha=np.float32(0.03), beta=np.float32(0.7),
                                                    k=np.float32(1.2)))
    _close(got, want)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_matches_onnx(batch_dims):
    x = _f((2, 3, 4), 8)
    idx = np.array([[[1, 2], [0, 1]], [[1, 0], [0, 2]]] if batch_dims == 0 else [[[2], [0]], [[1], [1]]], np.int64)
    want = _ort("GatherND", {"x": x, "i": idx}, batch_dims=batch_dims)
    _close(KERNELS["gather_nd"](None, dict(x=x, indices=idx.astype(np.int32), batch_dims=batch_dims)), want, 0)


@pytest.mark.parametrize("reduction,mode", [("none", "update"), ("add", "add"), ("mul", "mul"), ("max", "max"),
                                            ("min", "min")])
def test_scatter_nd_matches_onnx(reduction, mode):
    data, updates = _f((3, 4, 2), 9), _f((3, 2), 10)
    idx = np.array([[2, 1], [0, 3], [2, 1]] if reduction != "none" else [[2, 1], [0, 3], [1, 0]], np.int64)
    want = _ort("ScatterND", {"d": data, "i": idx, "u": updates}, reduction=reduction)
    _close(KERNELS["scatter_nd"](None, dict(data=data, indices=idx.astype(np.int32), updates=updates, mode=mode)), want)


def test_one_hot_matches_onnx():
    idx = np.array([[0, 3, 1], [2, 2, 0]], np.int64)
    want = _ort("OneHot", {"i": idx}, {"d": np.array(4, np.int64), "v": np.float32([-2, 5])}, axis=1)
    got = KERNELS["one_hot"](None, dict(indices=idx.astype(np.int32), one_hot_vector_size=4, axis=1,
                                        on_value=np.float32(5), off_value=np.float32(-2)))
    _close(got, want, 0)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_matches_onnx(direction):
    seq, batch, inp, hid = 4, 2, 3, 5
    dirs = 2 if direction == "bidirectional" else 1
    x = _f((seq, batch, inp), 11)
    w, r, b = _f((dirs, 4 * hid, inp), 12) * 0.5, _f((dirs, 4 * hid, hid), 13) * 0.5, _f((dirs, 8 * hid), 14) * 0.3
    h0, c0, p = _f((dirs, batch, hid), 15), _f((dirs, batch, hid), 16), _f((dirs, 3 * hid), 17) * 0.3
    y, yh, yc = _ort("LSTM", {"x": x}, {"W": w, "R": r, "B": b, "L": np.full(batch, seq, np.int32), "h": h0,
                                        "c": c0, "P": p}, n_out=3, hidden_size=hid, direction=direction)
    # ONNX gate blocks [i, o, f, c] -> MIL [i, f, o, c]; peepholes [i, o, f] -> [i, f, o].
    order = lambda a, blocks: a.reshape(len(blocks), hid, *a.shape[1:])[blocks].reshape(a.shape)  # noqa: E731
    args = dict(x=x, initial_h=h0.transpose(1, 0, 2).reshape(batch, -1), initial_c=c0.transpose(1, 0, 2).reshape(batch, -1),
                direction=direction, output_sequence=True)
    for d, suffix in enumerate(["", "_back"][:dirs]):
        args[f"weight_ih{suffix}"] = order(w[d], [0, 2, 1, 3])
        args[f"weight_hh{suffix}"] = order(r[d], [0, 2, 1, 3])
        args[f"bias{suffix}"] = order(b[d, :4 * hid] + b[d, 4 * hid:], [0, 2, 1, 3])
        args[f"peephole{suffix}"] = order(p[d], [0, 2, 1])
    got_y, got_h, got_c = KERNELS["lstm"](None, args)
    _close(got_y.reshape(seq, batch, dirs, hid).transpose(0, 2, 1, 3), y)
    _close(got_h.reshape(batch, dirs, hid).transpose(1, 0, 2), yh)
    _close(got_c.reshape(batch, dirs, hid).transpose(1, 0, 2), yc)
