"""The table of numpy kernels the MIL executor (``mil_executor.py``) runs ops with, and the
argument helpers the kernel families (``kernels.py``, ``kernels_tensor.py``, ``kernels_vision.py``)
share.  A kernel is ``kernel(op, args) -> np.ndarray``, registered with
``@KERNELS.register("conv")`` under the MIL op type."""

from __future__ import annotations

import numpy as np

from ..registry import OpRegistry

KERNELS = OpRegistry("coreml-kernels", title="MIL executor")


def as_f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def text(value) -> str:
    """A MIL string argument (a 0-d numpy array or a str) as ``str``."""
    return str(value.item() if isinstance(value, np.ndarray) else value)
