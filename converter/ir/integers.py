"""Integer arithmetic every 8-bit file shares, whoever writes it: the quantizer (``quantize/``) and
the native integer exporters (``targets/*/quantized.py``) compute it the same way."""

from __future__ import annotations

import numpy as np


def int32_bias(bias: np.ndarray, scale) -> np.ndarray:
    """A bias as int32 on ``scale`` (input scale x weight scale, per channel or one): round half to
    even, saturated, as onnxruntime's quantizer, TensorFlow's converter and MACE's write it."""
    q = np.round(np.asarray(bias, np.float64).reshape(-1) / np.asarray(scale, np.float64).reshape(-1))
    return np.clip(q, -(2**31), 2**31 - 1).astype(np.int32)
