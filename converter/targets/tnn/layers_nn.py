"""Layers with weights or windows: convolution, deconvolution, pooling, inner product, matmul,
normalizations and PReLU.

TNN's Convolution/Deconvolution/Pooling take one symmetric pad per spatial axis (pad_type -1;
conv_layer_interpreter.cc stores [w, w, h, h]).  Uneven ONNX pads therefore become an explicit
``Pad`` layer in front (convolution, pooling) or a ``StridedSliceV2`` crop behind
(deconvolution) — never a SAME_UPPER guess, which is what onnx2tnn writes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from .context import ExportContext
from .layers import FLT_MAX
from .registry import OPS


def _pads_2d(node: gs.Node, ctx: ExportContext, spatial: tuple[int, int], kernel, strides, dilations) -> list[int]:
    """ONNX pads [h_begin, w_begin, h_end, w_end], with auto_pad resolved on static shapes."""
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("NOTSET", ""):
        return [int(p) for p in node.attrs.get("pads", [0, 0, 0, 0])]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = math.ceil(size / s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


def _spatial_attrs(node: gs.Node, ctx: ExportContext, kernel_rank: int = 2):
    strides = [int(s) for s in node.attrs.get("strides", [1] * kernel_rank)]
    dilations = [int(d) for d in node.attrs.get("dilations", [1] * kernel_rank)]
    return strides, dilations


def _pad_layer(ctx: ExportContext, src: str, pads: list[int], fill: float) -> str:
    """A TNN ``Pad`` layer (pad_layer_interpreter.cc field order) that makes ``pads`` explicit."""
    padded = ctx.new_blob(f"{src}_padded")
    hb, wb, he, we = pads
    ctx.emit("Pad", [src], [padded], [0, 0, hb, he, wb, we, 0, 0, 0, np.float32(fill)],
             name=ctx.layer_name("_pad"))
    return padded


@OPS.register("Conv")
def conv(ctx: ExportContext, node: gs.Node) -> None:
    """``group input_channel output_channel kernel_h kernel_w stride_h stride_w pad_h pad_w
    has_bias pad_type dilation_h dilation_w activation_type`` (conv_layer_interpreter.cc); every
    field written, so a default never shifts the ones after it.  input_channel is C_in/group
    (layer_param.h).  Resource: ``string name ; int has_bias ; Raw filter [O, I/g, kh, kw] ;
    [Raw bias]``."""
    weight = ctx.const(node.inputs[1])
    bias = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    if weight is None or weight.ndim != 4:
        raise ctx.unsupported("TNN's Convolution needs a constant 4-D (2-D conv) weight")
    if len(node.inputs) > 2 and node.inputs[2].name and bias is None:
        raise ctx.unsupported("Conv bias must be constant")
    x = node.inputs[0]
    kh, kw = weight.shape[2:]
    strides, dilations = _spatial_attrs(node, ctx)
    pads = _pads_2d(node, ctx, ctx.shape(x)[2:], (kh, kw), strides, dilations)
    src = ctx.blob(x)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        src, pads = _pad_layer(ctx, src, pads, 0.0), [0, 0, 0, 0]
    group = int(node.attrs.get("group", 1))
    has_bias = int(bias is not None)
    name = ctx.layer_name()
    params = [group, weight.shape[1], weight.shape[0], kh, kw, strides[0], strides[1], pads[0], pads[1],
              has_bias, -1, dilations[0], dilations[1], 0]
    resource = [("str", name), ("int", has_bias), ("raw", ctx.raw(weight, weight=True))]
    if has_bias:
        resource.append(("raw", ctx.raw(bias, weight=True)))
    ctx.emit("Convolution", [src], [ctx.blob(node.outputs[0])], params, resource, name=name)


@OPS.register("ConvTranspose")
def deconv(ctx: ExportContext, node: gs.Node) -> None:
    """Same fields as Convolution (conv_layer_interpreter.cc registers both); input_channel =
    W.dims(0)/group, output_channel = W.dims(1)*group, filter in ONNX layout [I, O/g, kh, kw].
    With pad_type -1 TNN's output is s*(in-1) + k_ext - 2*pad (deconv_layer.cc).  ONNX's
    uneven pads / output_padding become the largest symmetric pad plus a StridedSliceV2 crop;
    onnx2tnn's pad_type 3 would crop ceil((k-s)/2) in front, which differs from ONNX's pads."""
    weight = ctx.const(node.inputs[1])
    bias = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    if weight is None or weight.ndim != 4:
        raise ctx.unsupported("TNN's Deconvolution needs a constant 4-D (2-D deconv) weight")
    if node.attrs.get("output_shape") is not None or node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        raise ctx.unsupported("ConvTranspose with output_shape/auto_pad (give explicit pads)")
    group = int(node.attrs.get("group", 1))
    kh, kw = weight.shape[2:]
    strides, dilations = _spatial_attrs(node, ctx)
    pads = [int(p) for p in node.attrs.get("pads", [0, 0, 0, 0])]
    out_pad = [int(p) for p in node.attrs.get("output_padding", [0, 0])]
    crop_end = [pads[2] - out_pad[0], pads[3] - out_pad[1]]
    if min(crop_end) < 0:
        raise ctx.unsupported("output_padding larger than the end pad")
    sym = [min(pads[0], crop_end[0]), min(pads[1], crop_end[1])]
    x = ctx.shape(node.inputs[0])
    full = [strides[i] * (x[2 + i] - 1) + dilations[i] * ((kh, kw)[i] - 1) + 1 - 2 * sym[i] for i in (0, 1)]
    out = ctx.blob(node.outputs[0])
    needs_crop = sym != [pads[0], pads[1]] or sym != crop_end
    deconv_out = ctx.new_blob(f"{out}_uncropped") if needs_crop else out
    has_bias = int(bias is not None)
    name = ctx.layer_name()
    params = [group, weight.shape[0] // group, weight.shape[1] * group, kh, kw, strides[0], strides[1],
              sym[0], sym[1], has_bias, -1, dilations[0], dilations[1], 0]
    resource = [("str", name), ("int", has_bias), ("raw", ctx.raw(weight, weight=True))]
    if has_bias:
        resource.append(("raw", ctx.raw(bias, weight=True)))
    ctx.emit("Deconvolution", [ctx.blob(node.inputs[0])], [deconv_out], params, resource, name=name)
    if needs_crop:
        begins = [pads[0] - sym[0], pads[1] - sym[1]]
        ends = [full[0] - (crop_end[0] - sym[0]), full[1] - (crop_end[1] - sym[1])]
        ctx.emit("StridedSliceV2", [deconv_out], [out], [2, *begins, 2, *ends, 2, 2, 3, 2, 1, 1],
                 name=ctx.layer_name("_crop"))


def _tnn_pool_out(size: int, k: int, s: int, pad: int, ceil_mode: int) -> int:
    """Output size of TNN's Pooling with pad_type -1 (pooling_layer.cc)."""
    value = (size + 2 * pad - k) / s + 1
    return int(math.ceil(value) if ceil_mode else math.floor(value))


@OPS.register("MaxPool", "AveragePool")
def pool(ctx: ExportContext, node: gs.Node) -> None:
    """``pool_type kernel_h kernel_w stride_h stride_w pad_h pad_w kernel_index_h kernel_index_w
    pad_type ceil_mode is_adaptive_pool output_h output_w`` (pooling_layer_interpreter.cc).
    TNN's average excludes padding (NaivePooling divides by the in-bounds count), like ONNX's
    count_include_pad=0; other cases get an explicit Pad layer."""
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise ctx.unsupported("MaxPool indices output")
    kernel = [int(k) for k in node.attrs["kernel_shape"]]
    if len(kernel) != 2:
        raise ctx.unsupported("TNN's Pooling is 2-D")
    strides, dilations = _spatial_attrs(node, ctx)
    if dilations != [1, 1]:
        raise ctx.unsupported("dilated pooling")
    x = node.inputs[0]
    in_hw = ctx.shape(x)[2:]
    out_hw = ctx.shape(node.outputs[0])[2:]
    pads = _pads_2d(node, ctx, in_hw, kernel, strides, dilations)
    is_max = node.op == "MaxPool"
    include_pad = not is_max and bool(node.attrs.get("count_include_pad", 0)) and any(pads)
    src = ctx.blob(x)
    if pads[0] != pads[2] or pads[1] != pads[3] or include_pad:
        if not is_max and not include_pad:
            raise ctx.unsupported("uneven pads on an average pool that excludes padding")
        src = _pad_layer(ctx, src, pads, -FLT_MAX if is_max else 0.0)
        in_hw = tuple(in_hw[i] + pads[i] + pads[i + 2] for i in (0, 1))
        pads = [0, 0, 0, 0]
    ceil_mode = None
    for mode in (int(node.attrs.get("ceil_mode", 0)), 0, 1):
        if all(_tnn_pool_out(in_hw[i], kernel[i], strides[i], pads[i], mode) == out_hw[i] for i in (0, 1)):
            ceil_mode = mode
            break
    if ceil_mode is None:
        raise ctx.unsupported(f"TNN's pooling output size formula cannot give {list(out_hw)}")
    params = [0 if is_max else 1, kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1],
              -1, -1, -1, ceil_mode, 0, 0, 0]
    ctx.emit("Pooling", [src], [ctx.blob(node.outputs[0])], params)


@OPS.register("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: ExportContext, node: gs.Node) -> None:
    """Pooling with kernel 0 0 = the whole H x W (pooling_layer_interpreter.cc: is_global_pool)."""
    if ctx.rank(node.inputs[0]) != 4:
        raise ctx.unsupported("TNN's Pooling is 2-D")
    pool_type = 0 if node.op == "GlobalMaxPool" else 1
    params = [pool_type, 0, 0, 1, 1, 0, 0, -1, -1, -1, 0, 0, 0, 0]
    ctx.emit("Pooling", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("Gemm")
def gemm(ctx: ExportContext, node: gs.Node) -> None:
    """InnerProduct ``num_output has_bias transpose axis`` (inner_product_layer_interpreter.cc,
    all four required); resource ``string name ; Raw weight [N, K] ; Raw bias [N]``."""
    a, b = node.inputs[:2]
    weight = ctx.const(b)
    c = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    if weight is None or node.attrs.get("transA", 0) or ctx.rank(a) != 2:
        raise ctx.unsupported("InnerProduct needs a 2-D blob A (not transposed) and a constant B")
    if len(node.inputs) > 2 and node.inputs[2].name and c is None:
        raise ctx.unsupported("Gemm C must be constant")
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    weight = weight if node.attrs.get("transB", 0) else weight.T
    if alpha != 1.0:
        weight = weight * np.float32(alpha)
    n = weight.shape[0]
    bias = np.zeros(n, np.float32) if c is None else np.asarray(c, np.float32) * np.float32(beta)
    if bias.size not in (1, n) or (bias.ndim == 2 and bias.shape[0] != 1):
        raise ctx.unsupported("Gemm C that is not a per-output bias")
    bias = np.broadcast_to(bias.reshape(-1), (n,))
    name = ctx.layer_name()
    ctx.emit("InnerProduct", [ctx.blob(a)], [ctx.blob(node.outputs[0])], [n, 1, 0, 1],
             [("str", name), ("raw", ctx.raw(weight, weight=True)), ("raw", ctx.raw(bias, weight=True))],
             name=name)


@OPS.register("MatMul")
def matmul(ctx: ExportContext, node: gs.Node) -> None:
    """``weight_position`` (mat_mul_layer_interpreter.cc): -1 both blobs, else which operand is the
    constant held as ``Raw weight`` in the .tnnmodel (float, as onnx2tnn writes it).

    Batch broadcasting: TNN's kernels index an operand's flattened batch as ``bc < batch ? bc : 0``
    (x86_mat_mul_layer_acc.cc:98-100) or ``bc % batch`` (cpu_mat_mul_layer_acc.cc:99-100), which
    is ONNX broadcasting only when that batch is 1 or the output's.  Any other operand (a
    [2, 4, n, k] @ [4, k, m] pair, or [2, 1] against [1, 4] batches) is first expanded to the
    output's batch dims: an ``Expand`` layer for a blob, the broadcast array for a constant."""
    a, b = node.inputs
    const_a, const_b = ctx.const(a), ctx.const(b)
    out = ctx.blob(node.outputs[0])
    if const_a is not None and const_b is not None:
        raise ctx.unsupported("both operands are constants (fold constants first)")
    batch = ctx.shape(node.outputs[0])[:-2] if ctx.rank(a) >= 2 and ctx.rank(b) >= 2 else ()
    blob_a = _batched_operand(ctx, a, const_a, batch)
    blob_b = _batched_operand(ctx, b, const_b, batch)
    if const_b is not None:
        const_b = _broadcast_batch(const_b, batch)
    if const_a is not None:
        const_a = _broadcast_batch(const_a, batch)
    if const_a is None and const_b is None:
        ctx.emit("MatMul", [blob_a, blob_b], [out], [-1])
    elif const_b is not None:
        ctx.emit("MatMul", [blob_a], [out], [1], [("raw", ctx.raw(const_b))])
    else:
        ctx.emit("MatMul", [blob_b], [out], [0], [("raw", ctx.raw(const_a))])


def _needs_batch_expand(shape: tuple[int, ...], batch: tuple[int, ...]) -> bool:
    count = int(np.prod(shape[:-2], dtype=np.int64)) if len(shape) > 2 else 1
    return len(shape) >= 2 and count not in (1, int(np.prod(batch, dtype=np.int64)))


def _broadcast_batch(value: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    if not _needs_batch_expand(value.shape, batch):
        return value
    return np.ascontiguousarray(np.broadcast_to(value, (*batch, *value.shape[-2:])))


def _batched_operand(ctx: ExportContext, tensor, value, batch: tuple[int, ...]) -> str | None:
    """The blob for a MatMul operand (None for a constant), expanded to ``batch`` if it must be."""
    if value is not None:
        return None
    shape = ctx.shape(tensor)
    if not _needs_batch_expand(shape, batch):
        return ctx.blob(tensor)
    full = (*batch, *shape[-2:])
    expanded = ctx.new_blob(tensor.name + "_batch")
    ctx.emit("Expand", [ctx.blob(tensor)], [expanded], [len(full), *full], name=ctx.layer_name("_batch"))
    return expanded


@OPS.register("BatchNormalization")
def batch_norm(ctx: ExportContext, node: gs.Node) -> None:
    """BatchNormCxx: no parameters (batch_norm_layer_interpreter.cc); resource ``Raw scale ; Raw
    bias`` per channel, y = x * scale + bias."""
    values = [ctx.const(t) for t in node.inputs[1:5]]
    if any(v is None for v in values) or node.attrs.get("training_mode", 0):
        raise ctx.unsupported("BatchNormalization needs constant statistics (inference mode)")
    gamma, beta, mean, var = (v.astype(np.float64) for v in values)
    scale = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    bias = beta - mean * scale
    ctx.emit("BatchNormCxx", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [],
             [("raw", ctx.raw(scale.astype(np.float32), weight=True)),
              ("raw", ctx.raw(bias.astype(np.float32), weight=True))])


@OPS.register("InstanceNormalization")
def instance_norm(ctx: ExportContext, node: gs.Node) -> None:
    """InstBatchNormCxx ``channels eps`` (instance_norm_layer_interpreter.cc); resource ``Raw scale
    ; Raw bias``."""
    scale, bias = ctx.const(node.inputs[1]), ctx.const(node.inputs[2])
    if scale is None or bias is None:
        raise ctx.unsupported("InstanceNormalization needs constant scale and bias")
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    ctx.emit("InstBatchNormCxx", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [scale.size, eps],
             [("raw", ctx.raw(scale, weight=True)), ("raw", ctx.raw(bias, weight=True))])


@OPS.register("LayerNormalization")
def layer_norm(ctx: ExportContext, node: gs.Node) -> None:
    """LayerNorm ``reduce_dims_size eps`` (layer_norm_layer_interpreter.cc) with three input blobs
    x, scale, bias (layer_norm_layer.cc); scale and bias live in the .tnnmodel constant map, as
    onnx_converter_layer_norm.cc arranges ("no LayerResource, use const_resource_map")."""
    if any(t.name for t in node.outputs[1:]) and any(len(t.outputs) for t in node.outputs[1:]):
        raise ctx.unsupported("LayerNormalization mean/inv_std outputs")
    shape = ctx.shape(node.inputs[0])
    axis = ctx.positive_axis(int(node.attrs.get("axis", -1)), len(shape))
    norm_shape = shape[axis:]
    scale = ctx.const(node.inputs[1])
    bias = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else np.zeros(1, np.float32)
    if scale is None or bias is None:
        raise ctx.unsupported("LayerNormalization needs constant scale and bias")
    blobs = []
    for role, value in (("scale", scale), ("bias", bias)):
        blob = ctx.new_blob(f"{ctx.layer_name_hint()}_{role}")
        ctx.constants[blob] = ctx.raw(np.broadcast_to(value.astype(np.float32), norm_shape))
        blobs.append(blob)
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    ctx.emit("LayerNorm", [ctx.blob(node.inputs[0]), *blobs], [ctx.blob(node.outputs[0])], [len(norm_shape), eps])


@OPS.register("PRelu")
def prelu(ctx: ExportContext, node: gs.Node) -> None:
    """PReLU ``channel_shared has_filler`` (prelu_layer_interpreter.cc); resource ``string name ;
    Raw slope`` with one slope per channel (dim 1, cpu_prelu_layer_acc.cc) or one shared."""
    slope = ctx.const(node.inputs[1])
    shape = ctx.shape(node.inputs[0])
    if slope is None or len(shape) < 2:
        raise ctx.unsupported("PRelu needs a constant slope and an input of rank >= 2")
    full = np.broadcast_to(slope.astype(np.float32), shape)
    per_channel = full[(0, slice(None)) + (0,) * (len(shape) - 2)]
    expected = per_channel.reshape((1, shape[1]) + (1,) * (len(shape) - 2))
    if not np.array_equal(np.broadcast_to(expected, shape), full):
        raise ctx.unsupported("PRelu slope that varies along a non-channel axis")
    shared = int(np.all(per_channel == per_channel[0]) and slope.size == 1)
    values = per_channel[:1] if shared else per_channel
    name = ctx.layer_name()
    ctx.emit("PReLU", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [shared, 0],
             [("str", name), ("raw", ctx.raw(np.ascontiguousarray(values)))], name=name)
