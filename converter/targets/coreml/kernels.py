"""numpy kernels for the MIL ops coremltools has no ``value_inference`` for.

Each kernel follows Apple's MIL op spec (the op docstrings in coremltools
``converters/mil/mil/ops/defs/iOS15/{conv,pool,normalization,activation,image_resizing,
tensor_transformation}.py`` at apple/coremltools@e0e2f42) and
is tested against onnxruntime on the equivalent ONNX op (``tests/test_coreml_kernels.py``).

Signature: ``kernel(op, args) -> np.ndarray`` where ``args`` maps the op's input names to
numpy values.  Arithmetic is done in float32; the executor then rounds to the dtype the program
declares (fp16 programs round after every op).
"""

from __future__ import annotations

import itertools
import math
import numpy as np

from ...ir.conv_math import conv_columns, conv_transpose_full, windows
from ...errors import Unsupported
from . import kernels_tensor, kernels_vision  # noqa: F401  (importing this module loads every kernel family)
from .kernel_registry import KERNELS, as_f32, text

def _ints(value, n: int, default: int) -> list[int]:
    return [default] * n if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _pad_type(args) -> str:
    return text(args.get("pad_type", "valid"))


def _conv_pads(args, in_sizes, window_sizes, strides) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial axis for conv/pool pad types valid/custom/same/same_lower.

    ``same``: output = ceil(in / stride), total padding split with the extra element at the end;
    ``same_lower`` puts it at the beginning (MIL conv spec, ``pad_type``).
    """
    pad_type = _pad_type(args)
    n = len(in_sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        pad = _ints(args.get("pad"), 2 * n, 0)
        return [(pad[2 * i], pad[2 * i + 1]) for i in range(n)]
    if pad_type in ("same", "same_lower"):
        pads = []
        for size, window, stride in zip(in_sizes, window_sizes, strides):
            out = math.ceil(size / stride)
            total = max((out - 1) * stride + window - size, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if pad_type == "same" else (big, small))
        return pads
    raise Unsupported(f"pad_type '{pad_type}' is not implemented")


@KERNELS.register("conv")
def conv(op, args) -> np.ndarray:
    """y[n, o, p] = bias[o] + sum_{c in group(o), k} w[o, c, k] * x_pad[n, c, p*stride + k*dilation]."""
    x, w = as_f32(args["x"]), as_f32(args["weight"])
    spatial = x.ndim - 2
    strides = _ints(args.get("strides"), spatial, 1)
    dilations = _ints(args.get("dilations"), spatial, 1)
    groups = int(args.get("groups", 1))
    kernel_sizes = list(w.shape[2:])
    extents = [(k - 1) * d + 1 for k, d in zip(kernel_sizes, dilations)]
    pads = _conv_pads(args, x.shape[2:], extents, strides)
    x = np.pad(x, [(0, 0), (0, 0)] + pads)
    cols, out_sizes = conv_columns(x, kernel_sizes, strides, dilations, groups)
    n = x.shape[0]
    wg = w.reshape(groups, w.shape[0] // groups, -1)
    if groups == 1:  # a plain 2-D product per sample: numpy's batched matmul is slower here
        y = np.stack([wg[0] @ cols[i, 0] for i in range(n)])
    else:
        y = np.matmul(wg, cols)
    y = y.reshape(n, w.shape[0], *out_sizes)
    if args.get("bias") is not None:
        y = y + as_f32(args["bias"]).reshape((1, -1) + (1,) * spatial)
    return y


@KERNELS.register("conv_transpose")
def conv_transpose(op, args) -> np.ndarray:
    """Scatter form: every input position p adds w[c, o, k] * x[n, c, p] to
    y_full[n, o, p*stride + k*dilation]; then ``pad`` crops (begin, end) per axis."""
    x, w = as_f32(args["x"]), as_f32(args["weight"])
    spatial = x.ndim - 2
    strides = _ints(args.get("strides"), spatial, 1)
    dilations = _ints(args.get("dilations"), spatial, 1)
    groups = int(args.get("groups", 1))
    y = conv_transpose_full(x, w, strides, dilations, groups)
    full = y.shape[2:]
    pad_type = _pad_type(args)
    if pad_type == "custom":
        pad = _ints(args.get("pad"), 2 * spatial, 0)
        crop = tuple(slice(pad[2 * i], full[i] - pad[2 * i + 1]) for i in range(spatial))
        y = y[(slice(None), slice(None)) + crop]
    elif pad_type != "valid":
        raise Unsupported(f"conv_transpose pad_type '{pad_type}' is not implemented")
    output_shape = args.get("output_shape")
    if output_shape is not None and list(y.shape[2:]) != _ints(output_shape, x.ndim, 0)[2:]:
        # coremltools' pass add_conv_transpose_output_shape stores the shape implied by the pads;
        # any other output_shape has no documented placement, so refuse rather than guess.
        raise Unsupported(f"conv_transpose output_shape {_ints(output_shape, x.ndim, 0)} differs "
                          f"from the padded result {list(y.shape)}")
    if args.get("bias") is not None:
        y = y + as_f32(args["bias"]).reshape((1, -1) + (1,) * spatial)
    return y


def _pool_geometry(args, in_sizes):
    spatial = len(in_sizes)
    kernel_sizes = _ints(args["kernel_sizes"], spatial, 1)
    strides = _ints(args.get("strides"), spatial, 1)
    pads = _conv_pads(args, in_sizes, kernel_sizes, strides)
    ceil_mode = bool(np.asarray(args.get("ceil_mode", False)))
    outs = []
    for size, k, s, (pb, pe) in zip(in_sizes, kernel_sizes, strides, pads):
        span = size + pb + pe - k
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + pb:
            out -= 1  # PyTorch's rule: the last window must start inside input or begin padding
        outs.append(out)
    return kernel_sizes, strides, pads, outs


def _pool_inputs(x, kernel_sizes, strides, pads, outs, fill):
    """Pad x to cover every window; masks tell input positions and declared-padding positions."""
    widths = []
    for size, k, s, (pb, _pe), out in zip(x.shape[2:], kernel_sizes, strides, pads, outs):
        needed = (out - 1) * s + k
        widths.append((pb, max(needed - size - pb, 0)))
    padded = np.pad(x, [(0, 0), (0, 0)] + widths, constant_values=fill)
    inside = np.pad(np.ones(x.shape[2:], np.float32), widths)
    declared = np.zeros_like(inside)
    declared[tuple(slice(0, min(size + pb + pe, inside.shape[i]))
                   for i, (size, (pb, pe)) in enumerate(zip(x.shape[2:], pads)))] = 1
    return padded, inside, declared


#: Windows with more positions than this are reduced over a window view, not slice by slice.
_SLICED_WINDOW_MAX = 64


def _window_reduce(padded, kernel_sizes, strides, outs, ufunc):
    """``ufunc`` over each pooling window: one strided slice per window offset, combined
    elementwise (a reduction over the trailing axes of a window view is ~10x slower for the
    usual 2x2/3x3 windows; a big window, a global pool, is reduced over that view instead)."""
    if math.prod(kernel_sizes) > _SLICED_WINDOW_MAX:
        view = windows(padded, kernel_sizes, strides, [1] * len(kernel_sizes))
        view = view[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
        return ufunc.reduce(view, axis=tuple(range(-len(kernel_sizes), 0)))
    result = None
    for offset in itertools.product(*(range(k) for k in kernel_sizes)):
        part = padded[(slice(None), slice(None)) + tuple(
            slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offset, outs, strides))]
        result = part.copy() if result is None else ufunc(result, part, out=result)
    return result


@KERNELS.register("max_pool")
def max_pool(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    kernel_sizes, strides, pads, outs = _pool_geometry(args, x.shape[2:])
    padded, _, _ = _pool_inputs(x, kernel_sizes, strides, pads, outs, -np.inf)
    return _window_reduce(padded, kernel_sizes, strides, outs, np.maximum)


@KERNELS.register("avg_pool")
def avg_pool(op, args) -> np.ndarray:
    """Divisor: input positions only (``exclude_padding_from_average``) or input plus declared
    padding; never the ceil-mode overhang beyond the padding."""
    x = as_f32(args["x"])
    kernel_sizes, strides, pads, outs = _pool_geometry(args, x.shape[2:])
    padded, inside, declared = _pool_inputs(x, kernel_sizes, strides, pads, outs, 0.0)
    sums = _window_reduce(padded, kernel_sizes, strides, outs, np.add)
    mask = inside if bool(np.asarray(args.get("exclude_padding_from_average", False))) else declared
    counts = _window_reduce(mask[None, None], kernel_sizes, strides, outs, np.add)
    return sums / counts


def _channel(v, ndim):
    return as_f32(v).reshape((1, -1) + (1,) * (ndim - 2))


@KERNELS.register("batch_norm")
def batch_norm(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    eps = np.float32(args.get("epsilon", 1e-5))
    scale = _channel(args["gamma"], x.ndim) if args.get("gamma") is not None else 1.0
    shift = _channel(args["beta"], x.ndim) if args.get("beta") is not None else 0.0
    inv = 1.0 / np.sqrt(_channel(args["variance"], x.ndim) + eps)
    return (x - _channel(args["mean"], x.ndim)) * inv * scale + shift


@KERNELS.register("instance_norm")
def instance_norm(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(args.get("epsilon", 1e-5)))
    if args.get("gamma") is not None:
        y = y * _channel(args["gamma"], x.ndim)
    if args.get("beta") is not None:
        y = y + _channel(args["beta"], x.ndim)
    return y


@KERNELS.register("silu")
def silu(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    return x / (1.0 + np.exp(-x))


@KERNELS.register("upsample_nearest_neighbor")
def upsample_nearest_neighbor(op, args) -> np.ndarray:
    x = as_f32(args["x"])
    sh = float(np.asarray(args.get("scale_factor_height", 1)))
    sw = float(np.asarray(args.get("scale_factor_width", 1)))
    if not (sh.is_integer() and sw.is_integer()):
        raise Unsupported("upsample_nearest_neighbor with fractional scales is not implemented")
    return np.repeat(np.repeat(x, int(sh), axis=-2), int(sw), axis=-1)


@KERNELS.register("depth_to_space")
def depth_to_space(op, args) -> np.ndarray:
    """TF/ONNX-DCR order: channel c*b*b + (i*b + j)... -> y[c, h*b + i, w*b + j]."""
    x = as_f32(args["x"])
    b = int(np.asarray(args["block_size"]))
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


@KERNELS.register("pixel_shuffle")
def pixel_shuffle(op, args) -> np.ndarray:
    """PyTorch / ONNX-CRD order: channel c*r*r + i*r + j -> y[c, h*r + i, w*r + j]."""
    x = as_f32(args["x"])
    r = int(np.asarray(args["upscale_factor"]))
    n, c, h, w = x.shape
    y = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (r * r), h * r, w * r)


@KERNELS.register("space_to_depth")
def space_to_depth(op, args) -> np.ndarray:
    """Inverse of depth_to_space (TF/ONNX order): x[c, h*b + i, w*b + j] -> y[(i*b + j)*C + c, h, w]."""
    x = as_f32(args["x"])
    b = int(np.asarray(args["block_size"]))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@KERNELS.register("cumsum")
def cumsum(op, args) -> np.ndarray:
    """Own kernel although coremltools has a value_inference: its ``exclusive=True`` branch fails
    (``np.zeros(shape, data)`` in coremltools 9.0 ops/defs/iOS15/tensor_operation.py cumsum).  Spec: exclusive
    sums exclude the current element; reverse sums run from the end."""
    x = np.asarray(args["x"])
    axis = int(np.asarray(args.get("axis", 0)))
    if bool(np.asarray(args.get("reverse", False))):
        x = np.flip(x, axis=axis)
    y = np.cumsum(x, axis=axis, dtype=np.float32 if x.dtype.kind == "f" else None)
    if bool(np.asarray(args.get("exclusive", False))):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)),
                            np.take(y, range(y.shape[axis] - 1), axis=axis)], axis=axis)
    if bool(np.asarray(args.get("reverse", False))):
        y = np.flip(y, axis=axis)
    return y
