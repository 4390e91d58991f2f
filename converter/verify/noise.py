"""The float32 noise floor of a model's own outputs: how far they move under float32 rounding alone.

Two correct float32 implementations of one model (onnxruntime and torch, or LiteRT, TNN, MACE)
differ by rounding: different accumulation orders, fused multiply-adds, other transcendental
approximations.  For most outputs that is far below ``atol + rtol * |ref|``; for some (a
detection head's large box coordinates, a difference of two large activations) it is not, and
a fixed tolerance would fail a faithful port.  So verification also estimates, per output, the
floor below which no float32 runtime can be asked to agree, and judges a target against a stated
multiple of it (``noise_multiple`` in the tolerance profile, default :data:`DEFAULT_MULTIPLE`).

Estimate: the reference model is run twice in onnxruntime, once as given and once with every
float initializer and float input rounded differently: each value moved by one float32 rounding
unit (relative ``2**-24``, i.e. half an ulp, the error of one correct rounding) in a seeded
random direction.  That perturbation is what rounding a model's parameters and inputs to float32
does, and its effect on the outputs, propagated through the model's own conditioning, is the
per-output floor: ``max_abs`` (largest element difference) and ``normalized_rmse`` (as
:func:`converter.verify.metrics.normalized_rmse`).  The estimate costs one extra reference run
per sample and is computed only when some output misses ``atol``/``rtol``.

A target passes an output on the noise floor when both its max abs error and its normalized rMSE
are within ``noise_multiple`` times the floor's; a real error (a wrong weight, a wrong kernel)
is orders of magnitude above it and still fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from . import metrics

#: A target within this many times an output's float32 noise floor passes that output.
DEFAULT_MULTIPLE = 16.0
#: One float32 rounding: half an ulp, relative.
ROUNDING_UNIT = 2.0 ** -24


@dataclass(frozen=True)
class NoiseFloor:
    max_abs: float
    normalized_rmse: float

    def to_dict(self) -> dict:
        return {"max_abs": self.max_abs, "normalized_rmse": self.normalized_rmse,
                "method": "float32 rounding of weights and inputs (relative 2^-24, seeded), onnxruntime"}


def _nudge(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if values.dtype != np.float32 or values.size == 0:
        return values
    signs = rng.choice(np.array([-1.0, 1.0]), size=values.shape)
    return (values.astype(np.float64) * (1.0 + signs * ROUNDING_UNIT)).astype(np.float32)


def perturbed_model(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` with every float32 initializer (and Constant node) moved by one rounding."""
    from ..ir.weights import to_array

    rng = np.random.default_rng(seed)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    for init in twin.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(_nudge(to_array(init), rng), init.name))
    for node in twin.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == onnx.TensorProto.FLOAT:
                    attr.t.CopyFrom(numpy_helper.from_array(_nudge(numpy_helper.to_array(attr.t), rng), attr.t.name))
    return twin


def estimate(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], ref_outs: list[dict[str, np.ndarray]],
             seed: int = 0) -> dict[str, NoiseFloor]:
    """Per output: the float32 noise floor over ``samples`` (``ref_outs``: the model's outputs)."""
    from ..runtimes.onnxruntime import onnx_runner

    run = onnx_runner(perturbed_model(model, seed))
    rng = np.random.default_rng(seed + 1)
    floors: dict[str, list[tuple[float, float]]] = {}
    for sample, ref in zip(samples, ref_outs):
        nudged = {k: _nudge(np.asarray(v), rng) for k, v in sample.items()}
        got = run(nudged)
        for name, value in ref.items():
            if name not in got or np.shape(got[name]) != np.shape(value) or not np.issubdtype(
                    np.asarray(value).dtype, np.floating):
                continue
            floors.setdefault(name, []).append((metrics.max_abs(value, got[name]),
                                                metrics.normalized_rmse(value, got[name])))
    return {name: NoiseFloor(max(a for a, _ in vals), max(r for _, r in vals)) for name, vals in floors.items()}
