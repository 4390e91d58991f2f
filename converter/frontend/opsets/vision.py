"""Sampling and image-block operators: GridSample-20's mode names, AffineGrid-20 and Col2Im-18
(new at 18/20, spelled exactly in opset-17 ops) and RoiAlign-10's coordinate convention."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr
from .base import Unadaptable, adapter, constant_ints, rank_of, text

_GRIDSAMPLE16_MODES = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest",
                       "bilinear": "bilinear", "bicubic": "bicubic"}


@adapter("GridSample", 20, 22)
def gridsample_mode_names_of_16(rw, node: gs.Node) -> None:
    """GridSample-20 → -16: 'linear' and 'cubic' are -16's 'bilinear' and 'bicubic'; only
    4-D inputs (-20 added volumetric sampling).

    before: GridSample(x[N,C,H,W], grid; mode=linear) ─► y
    after:  GridSample(x, grid; mode=bilinear) ─► y
    """
    rank = rank_of(node.inputs[0])
    if rank != 4:
        raise Unadaptable(f"a rank-{rank} input (GridSample-16 samples 4-D inputs only)")
    mode = text(node, "mode", "linear")
    if mode not in _GRIDSAMPLE16_MODES:
        raise Unadaptable(f"mode={mode!r} is not one ONNX defines")
    node.attrs["mode"] = _GRIDSAMPLE16_MODES[mode]


@adapter("AffineGrid", 20)
def affinegrid_as_matmul(rw, node: gs.Node) -> None:
    """AffineGrid-20 → the grid as a product with a constant base grid (2-D and 3-D).

    before: theta[N,r,r+1], size=[N,C,H,W] ─► AffineGrid(align_corners) ─► grid[N,H,W,r]
    after:  MatMul(base[1, H·W, r+1], Transpose(theta; 0,2,1)) ─► Reshape[N,H,W,r] ─► grid
            (base rows: (x, y, 1) with x fastest; x = linspace(-1, 1) or pixel centres)
    """
    theta = node.inputs[0]
    size = constant_ints(node, 1, "size")
    spatial = size[2:]
    if len(spatial) not in (2, 3):
        raise Unadaptable(f"size {size} is neither 2-D nor 3-D")
    align = int(attr(node, "align_corners", 0))
    axes = [_coordinates(n, align) for n in reversed(spatial)]  # x (fastest), y[, z]
    mesh = np.meshgrid(*axes, indexing="ij")  # indexed [x, y, (z)]
    points = np.stack([m.transpose(tuple(reversed(range(len(axes))))).reshape(-1) for m in mesh], axis=-1)
    base = np.concatenate([points, np.ones((points.shape[0], 1))], axis=1)[None]
    product = rw.emit("MatMul", [rw.const("base", base), rw.emit("Transpose", [theta], {"perm": [0, 2, 1]})])
    rw.out("Reshape", [product, rw.ints("shape", [size[0], *spatial, len(spatial)])])


def _coordinates(n: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
    return (2.0 * np.arange(n) + 1.0) / n - 1.0


@adapter("Col2Im", 18)
def col2im_as_convtranspose(rw, node: gs.Node) -> None:
    """Col2Im-18 → a grouped ConvTranspose whose kernel puts each column entry back at its place
    in the block (one-hot weights; overlapping blocks add up, as Col2Im's do).

    before: x[N, C·kh·kw, L] ─► Col2Im(image_shape=[H,W], block_shape=[kh,kw]; strides, pads, dilations) ─► y[N,C,H,W]
    after:  x ─► Reshape[N, C·kh·kw, oh, ow] ─► ConvTranspose(one-hot W[C·kh·kw,1,kh,kw]; group=C,
            strides, pads, dilations, output_padding) ─► y
    """
    x = node.inputs[0]
    image, block = constant_ints(node, 1, "image_shape"), constant_ints(node, 2, "block_shape")
    dims = len(block)
    strides = list(attr(node, "strides", [1] * dims))
    dilations = list(attr(node, "dilations", [1] * dims))
    pads = list(attr(node, "pads", [0] * 2 * dims))
    shape = getattr(x, "shape", None)
    if not shape or not isinstance(shape[1], (int, np.integer)) or not isinstance(shape[0], (int, np.integer)):
        raise Unadaptable(f"the shape of '{x.name}' is not static (give --input-shape)")
    kernel = int(np.prod(block))
    channels = int(shape[1]) // kernel
    counts = [(image[i] + pads[i] + pads[i + dims] - (dilations[i] * (block[i] - 1) + 1)) // strides[i] + 1
              for i in range(dims)]
    built = [(counts[i] - 1) * strides[i] - pads[i] - pads[i + dims] + dilations[i] * (block[i] - 1) + 1
             for i in range(dims)]
    weight = np.zeros((channels * kernel, 1, *block), np.float32)
    for c in range(channels):
        for k, place in enumerate(np.ndindex(*block)):
            weight[(c * kernel + k, 0, *place)] = 1.0
    columns = rw.reshape(x, [int(shape[0]), channels * kernel, *counts])
    rw.out("ConvTranspose", [columns, rw.const("kernel", weight, dtype=rw.dtype)],
           {"group": channels, "kernel_shape": block, "strides": strides, "dilations": dilations, "pads": pads,
            "output_padding": [image[i] - built[i] for i in range(dims)]})


@adapter("RoiAlign", 10)
def roialign10_output_half_pixel(rw, node: gs.Node) -> None:
    """RoiAlign-10 → -16: -10 did not shift pixel centres, which -16 names 'output_half_pixel'
    (its default 'half_pixel' shifts by half a pixel).

    before: RoiAlign(x, rois, batch_indices; mode, …) ─► y
    after:  RoiAlign(x, rois, batch_indices; mode, …, coordinate_transformation_mode=output_half_pixel) ─► y
    """
    node.attrs["coordinate_transformation_mode"] = "output_half_pixel"
