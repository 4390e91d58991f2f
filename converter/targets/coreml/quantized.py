"""``--quantize int8-weights`` for CoreML: 8-bit weights as MIL ``constexpr_affine_dequantize``.

After ``mil_builder.build_program`` and before ``ct.convert`` serializes it, every constant
weight of ``conv`` / ``conv_transpose`` / ``linear`` / ``matmul`` (2-D or more, at least
``MIN_ELEMENTS`` values) becomes::

    w = constexpr_affine_dequantize(quantized_data=int8 q, zero_point=int8 0, scale=fp32 s, axis)

with symmetric per-output-channel scales ``s = max|w| / 127`` (one per tensor with
``per_channel=False``) — the iOS 16 op that Core ML resolves at load time, so the file stores
int8 weights (a quarter of fp32) and the compute stays float (fp16 on the Neural Engine with
``compute_precision`` fp16, which is ``--quantize fp16``'s native form).  The numpy executor
runs the op with :func:`affine_dequantize` (registered as its kernel).

Kept apart from the exporter (``__init__.py`` calls :func:`compress_weights` when asked).
"""

from __future__ import annotations

import numpy as np

from .kernel_registry import KERNELS

#: Weights smaller than this stay float (biases, tiny kernels: nothing to gain).
MIN_ELEMENTS = 64
#: MIL op -> (weight input name, output-channel axis of that weight).
WEIGHT_INPUTS = {"conv": ("weight", 0), "linear": ("weight", 0), "conv_transpose": ("weight", 1),
                 "matmul": ("y", -1)}


def quantize_symmetric(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and fp32 scales (per ``axis``, or one) with zero point 0."""
    if axis is None:
        absmax = np.array([np.abs(w).max()], np.float32)
        scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        return np.clip(np.rint(w / scale[0]), -127, 127).astype(np.int8), scale
    moved = np.moveaxis(w, axis, 0)
    absmax = np.abs(moved.reshape(moved.shape[0], -1)).max(axis=1)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8), scale


def compress_weights(program, per_channel: bool = True) -> int:
    """Rewrite the weights of ``program``'s main function in place; returns how many."""
    from coremltools.converters.mil import Builder as mb

    func = program.functions["main"]
    count, replaced = 0, []
    with func:
        for op in list(func.operations):
            spec = WEIGHT_INPUTS.get(op.op_type)
            if spec is None:
                continue
            var = op.inputs.get(spec[0])
            if var is None or var.op is None or var.op.op_type != "const" or var.val is None:
                continue
            value = np.asarray(var.val)
            if value.dtype != np.float32 or value.ndim < 2 or value.size < MIN_ELEMENTS:
                continue
            axis = spec[1] % value.ndim if per_channel else None
            if op.op_type == "conv_transpose" and int(np.asarray(op.inputs["groups"].val if "groups" in op.inputs
                                                                else 1)) != 1:
                axis = None  # output channels are split across groups
            q, scale = quantize_symmetric(value, axis)
            zero = np.zeros(scale.shape, np.int8)
            if axis is None:
                scale, zero, axis = scale.reshape(()), zero.reshape(()), 0
            new = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zero, scale=scale, axis=axis,
                                                 name=f"{var.name}_int8", before_op=op)
            func.replace_uses_of_var_after_op(anchor_op=new.op, old_var=var, new_var=new)
            replaced.append(var.op)
            count += 1
        func.remove_ops([o for o in replaced if not o.outputs[0].child_ops and o.outputs[0] not in func.outputs])
    return count


@KERNELS.register("constexpr_affine_dequantize")
def affine_dequantize(op, args) -> np.ndarray:
    """iOS 16 ``constexpr_affine_dequantize``: ``(quantized_data - zero_point) * scale`` with
    ``scale``/``zero_point`` scalars or vectors along ``axis``."""
    q = np.asarray(args["quantized_data"])
    scale = np.asarray(args["scale"], np.float32)
    zero = np.asarray(args["zero_point"]).astype(np.float32)
    axis = int(np.asarray(args["axis"]))
    if scale.ndim:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.ndim else zero
    return (q.astype(np.float32) - zero) * scale
