"""numpy kernels for MIL resampling / detection / normalization ops without a coremltools
``value_inference``: resize_bilinear, resample, crop_resize, non_maximum_suppression,
local_response_norm.

Each follows the op's docstring in coremltools ``converters/mil/mil/ops/defs/iOS15/
{image_resizing,tensor_operation,normalization}.py`` (and the iOS16 re-definitions, which only add
dtypes / ``pad_value``) and is tested against onnxruntime in ``tests/test_coreml_kernels_more.py``.
Where a spec leaves a case open the kernel refuses it rather than guess.
"""

from __future__ import annotations

import numpy as np

from ...errors import Unsupported
from .kernel_registry import KERNELS, as_f32, text


def _bilinear_grid(mode: str, size_in: int, size_out: int) -> np.ndarray:
    """resize_bilinear's sampling grid for one axis (spec Notes, "sampling_mode")."""
    i = np.arange(size_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if size_out == 1:
            grid = np.array([(size_in - 1) / 2.0 if mode == "ALIGN_CORNERS" else 0.0])
        else:
            grid = i * (size_in - 1) / (size_out - 1)
    elif mode == "DEFAULT":
        grid = i * ((size_in - size_in / size_out) / (size_out - 1)) if size_out > 1 else np.zeros(1)
    elif mode == "OFFSET_CORNERS":
        delta = max(1, size_in - 1) / size_out
        grid = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        spacing = size_in / size_out
        grid = i * spacing + 0.5 * spacing - 0.5
    else:
        raise Unsupported(f"resize_bilinear sampling_mode '{mode}' is not implemented")
    return np.clip(grid, 0, size_in - 1)


def _lerp_axis(x: np.ndarray, grid: np.ndarray, axis: int) -> np.ndarray:
    """Linear interpolation of ``x`` along ``axis`` at in-range positions ``grid``."""
    low = np.floor(grid).astype(np.int64)
    high = np.minimum(low + 1, x.shape[axis] - 1)
    frac = (grid - low).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = len(grid)
    frac = frac.reshape(shape)
    return np.take(x, low, axis=axis) * (1 - frac) + np.take(x, high, axis=axis) * frac


@KERNELS.register("resize_bilinear")
def resize_bilinear(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    mode = text(args.get("sampling_mode", "DEFAULT"))
    height = int(np.asarray(args.get("target_size_height", 1)))
    width = int(np.asarray(args.get("target_size_width", 1)))
    y = _lerp_axis(x, _bilinear_grid(mode, x.shape[-2], height), x.ndim - 2)
    return _lerp_axis(y, _bilinear_grid(mode, x.shape[-1], width), x.ndim - 1)


def _padded_index(i: np.ndarray, n: int, padding: str) -> tuple[np.ndarray, np.ndarray]:
    """Map integer positions of the conceptually padded image to real indices (resample spec,
    ``padding_mode``: border |1,2,3| -> 1,1,1,1,2,3,3,3,3; reflection -> 2,3,2,1,2,3,2,1,2;
    symmetric -> 3,2,1,1,2,3,3,2,1; constant -> padding_value).  Returns (index, inside)."""
    if padding == "constant":
        inside = (i >= 0) & (i < n)
        return np.clip(i, 0, n - 1), inside
    if padding == "border":
        return np.clip(i, 0, n - 1), np.ones(i.shape, bool)
    if padding == "reflection":
        if n == 1:
            return np.zeros_like(i), np.ones(i.shape, bool)
        period = 2 * (n - 1)
        j = np.mod(i, period)
        return np.where(j < n, j, period - j), np.ones(i.shape, bool)
    if padding == "symmetric":
        period = 2 * n
        j = np.mod(i, period)
        return np.where(j < n, j, period - 1 - j), np.ones(i.shape, bool)
    raise Unsupported(f"resample padding_mode '{padding}' is not implemented")


def _unnormalize(g: np.ndarray, n: int, mode: str, align_corners: bool) -> np.ndarray:
    """Coordinates -> pixel positions (resample spec, ``coordinates_mode`` / ``align_corners``:
    with align_corners the extrema are the corner pixels' centers, else their outer edges)."""
    if mode == "unnormalized":
        return g
    unit = (g + 1) / 2 if mode == "normalized_minus_one_to_one" else g
    if mode not in ("normalized_minus_one_to_one", "normalized_zero_to_one"):
        raise Unsupported(f"resample coordinates_mode '{mode}' is not implemented")
    return unit * (n - 1) if align_corners else unit * n - 0.5


@KERNELS.register("resample")
def resample(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    coords = np.asarray(args["coordinates"], dtype=np.float64)
    padding = text(args.get("padding_mode", "constant"))
    fill = np.float32(np.asarray(args.get("padding_value", 0.0)))
    mode, align = text(args.get("coordinates_mode")), bool(np.asarray(args.get("align_corners", False)))
    _, _, height, width = x.shape
    px = _unnormalize(coords[..., 0], width, mode, align)  # [B, H2, W2]
    py = _unnormalize(coords[..., 1], height, mode, align)
    batch = np.arange(x.shape[0])[:, None, None]

    def pixel(iy, ix):  # [B, C, H2, W2] values at integer positions of the padded image
        yy, in_y = _padded_index(iy, height, padding)
        xx, in_x = _padded_index(ix, width, padding)
        values = x[batch, :, yy, xx]  # [B, H2, W2, C]
        values = np.where((in_y & in_x)[..., None], values, fill)
        return np.moveaxis(values, -1, 1)

    sampling = text(args.get("sampling_mode", "bilinear"))
    if sampling == "nearest":
        return pixel(np.rint(py).astype(np.int64), np.rint(px).astype(np.int64))
    if sampling != "bilinear":
        raise Unsupported(f"resample sampling_mode '{sampling}' is not implemented")
    x0, y0 = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
    wx, wy = (px - x0).astype(np.float32)[:, None], (py - y0).astype(np.float32)[:, None]
    return ((pixel(y0, x0) * (1 - wx) + pixel(y0, x0 + 1) * wx) * (1 - wy)
            + (pixel(y0 + 1, x0) * (1 - wx) + pixel(y0 + 1, x0 + 1) * wx) * wy)


_BOX_LAYOUTS = {  # box_coordinate_mode -> how to get (h_start, w_start, h_end, w_end)
    "CORNERS_HEIGHT_FIRST": lambda a, b, c, d: (a, b, c, d),
    "CORNERS_WIDTH_FIRST": lambda a, b, c, d: (b, a, d, c),
    "CENTER_SIZE_HEIGHT_FIRST": lambda a, b, c, d: (a - c / 2, b - d / 2, a + c / 2, b + d / 2),
    "CENTER_SIZE_WIDTH_FIRST": lambda a, b, c, d: (b - d / 2, a - c / 2, b + d / 2, a + c / 2),
}


def _crop_grid(start: float, end: float, n: int, mode: str) -> np.ndarray:
    """Sample positions inside a box: ALIGN_CORNERS puts the first and last samples on the box
    edges (TF crop_and_resize's grid; a single sample goes to the center)."""
    if mode not in ("ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"):
        raise Unsupported(f"crop_resize sampling_mode '{mode}' is not implemented")
    if n == 1:
        return np.array([(start + end) / 2 if mode == "ALIGN_CORNERS" else start])
    return start + np.arange(n) * (end - start) / (n - 1)


@KERNELS.register("crop_resize")
def crop_resize(op, args) -> np.ndarray:
    """Out-of-image samples take ``pad_value`` (iOS16 spec: TF's ``extrapolation_value``)."""
    x = as_f32(args["x"])
    roi = np.asarray(args["roi"], dtype=np.float64).reshape(np.asarray(args["roi"]).shape[0], -1)
    th, tw = int(np.asarray(args.get("target_height", 1))), int(np.asarray(args.get("target_width", 1)))
    scale = float(np.asarray(args.get("spatial_scale", 1.0)))
    normalized = bool(np.asarray(args.get("normalized_coordinates", False)))
    layout = _BOX_LAYOUTS[text(args.get("box_coordinate_mode", "CORNERS_HEIGHT_FIRST"))]
    mode = text(args.get("sampling_mode", "DEFAULT"))
    fill = np.float32(np.asarray(args.get("pad_value", 0.0)))
    n_batch, channels, height, width = x.shape
    per_image = roi.shape[1] == 4
    out = np.zeros((roi.shape[0], n_batch if per_image else 1, channels, th, tw), np.float32)
    for r, box in enumerate(roi):
        images = range(n_batch) if per_image else [int(box[0])]
        h0, w0, h1, w1 = (v * scale for v in layout(*box[-4:]))
        if normalized:
            h0, h1, w0, w1 = h0 * (height - 1), h1 * (height - 1), w0 * (width - 1), w1 * (width - 1)
        gy, gx = _crop_grid(h0, h1, th, mode), _crop_grid(w0, w1, tw, mode)
        in_y, in_x = (gy >= 0) & (gy <= height - 1), (gx >= 0) & (gx <= width - 1)
        for k, image in enumerate(images):
            rows = _lerp_axis(x[image], np.clip(gy, 0, height - 1), 1)
            values = _lerp_axis(rows, np.clip(gx, 0, width - 1), 2)
            out[r, k] = np.where(in_y[:, None] & in_x[None, :], values, fill)
    return out


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of center-size (x, y, w, h) boxes."""
    def corners(b):
        return b[..., 0] - b[..., 2] / 2, b[..., 1] - b[..., 3] / 2, b[..., 0] + b[..., 2] / 2, b[..., 1] + b[..., 3] / 2

    ax0, ay0, ax1, ay1 = corners(box)
    bx0, by0, bx1, by1 = corners(others)
    inter = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None) * \
        np.clip(np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None)
    union = box[2] * box[3] + others[:, 2] * others[:, 3] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


@KERNELS.register("non_maximum_suppression")
def non_maximum_suppression(op, args):
    """Greedy NMS per batch in descending score order (a box's score: its best class; with
    ``per_class_suppression`` only boxes of the same best class suppress each other); scores below
    ``score_threshold`` are dropped, IoU > ``iou_threshold`` suppresses.  Outputs are padded to
    ``max_boxes`` (indices with -1) and the valid count is returned."""
    boxes, scores = np.asarray(args["boxes"], np.float64), np.asarray(args["scores"], np.float64)
    iou_threshold = float(np.asarray(args["iou_threshold"]))
    score_threshold = float(np.asarray(args["score_threshold"]))
    max_boxes = int(np.asarray(args["max_boxes"]))
    per_class = bool(np.asarray(args.get("per_class_suppression", False)))
    n, _, classes = scores.shape
    out_boxes = np.zeros((n, max_boxes, 4), np.float32)
    out_scores = np.zeros((n, max_boxes, classes), np.float32)
    out_indices = np.full((n, max_boxes), -1, np.int32)
    counts = np.zeros(n, np.int32)
    for b in range(n):
        best, label = scores[b].max(axis=1), scores[b].argmax(axis=1)
        chosen: list[int] = []
        for i in np.argsort(-best, kind="stable"):
            if len(chosen) == max_boxes or best[i] < score_threshold:
                break
            rivals = [j for j in chosen if not per_class or label[j] == label[i]]
            if rivals and np.any(_iou(boxes[b, i], boxes[b, rivals]) > iou_threshold):
                continue
            chosen.append(int(i))
        counts[b] = len(chosen)
        out_indices[b, :len(chosen)] = chosen
        out_boxes[b, :len(chosen)] = boxes[b, chosen]
        out_scores[b, :len(chosen)] = scores[b, chosen]
    return out_boxes, out_scores, out_indices, counts


@KERNELS.register("local_response_norm")
def local_response_norm(op, args) -> np.ndarray:
    """x / (k + alpha/size * sum_{window} x^2)^beta over ``size`` neighbouring channels centred on
    each channel (odd sizes; the spec does not place an even window)."""
    x = as_f32(args["x"])
    size = int(np.asarray(args["size"]))
    if size % 2 == 0:
        raise Unsupported("local_response_norm with an even size is not implemented")
    alpha, beta, k = (np.float32(np.asarray(args.get(name, d))) for name, d in
                      (("alpha", 1e-4), ("beta", 0.75), ("k", 1.0)))
    half = size // 2
    squares = np.pad(x * x, [(0, 0), (half, half)] + [(0, 0)] * (x.ndim - 2))
    window = sum(squares[:, i:i + x.shape[1]] for i in range(size))
    return x / (k + alpha / size * window) ** beta
