"""The complete TFLite op registry: importing this module fills :data:`OPS`.

ONNX op -> lowering function (which writes TFLite builtin ops).  Builtins only: no Flex/select
TensorFlow ops and no custom ops, so plain LiteRT runs every file.  Families: ``ops_nn`` (2-D
conv/pool/matmul/norm), ``ops_conv_nd`` (1-D, 3-D, grouped/dilated transpose), ``ops_resize``,
``ops_tensor`` (element-wise, reductions, shapes), ``ops_logic`` (compare/select/cast/arg/top-k),
``ops_index`` (gather/scatter/one-hot/range/shape), ``ops_norm`` (normalizations, activations),
``ops_rnn`` (LSTM).  Each family module registers its functions with ``@OPS.register(...)``
(``registry.py``).

Ops not registered raise :class:`~converter.errors.Unsupported` naming the node and op; the
planner is expected to have legalized them away for the chosen hardware.
"""

from __future__ import annotations

from . import ops_conv_nd, ops_index, ops_logic, ops_nn, ops_norm, ops_resize, ops_rnn, ops_tensor  # noqa: F401
from .registry import OPS

__all__ = ["OPS"]
