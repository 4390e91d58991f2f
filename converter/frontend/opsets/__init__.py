"""Any opset onnx knows, to the canonical opset (17), with edgeconv's own adapters.

The canonical opset stays 17 (docs/architecture.md, "Opset adapters", says why): a model of another opset
is brought to it node by node (:mod:`.driver`).  Each operator version whose meaning or
signature differs from its opset-17 form has an adapter, one module per family of operators;
an instance opset 17 cannot express exactly is refused in one line naming the node, the
operator, its version and the attribute or input.  onnx's ``version_converter`` is not used.

    from converter.frontend.opsets import adapt_to_canonical, ADAPTERS
"""

from __future__ import annotations

from . import activations, dtypes, legacy, norm, pad, quant, reduce, resize, scatter, shape, vision  # noqa: F401
from .base import ADAPTERS, Adapter, Unadaptable
from .driver import CHANGED_MEANING, OLDEST_OPSET, adapt_graph, adapt_to_canonical, compatible

__all__ = ["ADAPTERS", "CHANGED_MEANING", "OLDEST_OPSET", "Adapter", "Unadaptable", "adapt_graph",
           "adapt_to_canonical", "compatible"]
