"""Rewrite rules, one module per family; importing this package registers them all.

    from converter.legalize.rewrites import REGISTRY, rules_for, apply_rule
"""

from __future__ import annotations

from . import (activations, arithmetic, cleanup, conv_nd, convtranspose, crop, deconv, decompose,  # noqa: F401
               einsum, expand, fold, groups, linear, norm_rank, pad, pool_nd, rank, reduce,
               scatter, taps, functions)  # importing a module registers its rules (functions last)
from .base import (APPROXIMATE, EXACT, KINDS, REGISTRY, RETRAIN, Rule, apply_rule,
                   apply_rule_to_graph, rules_for)
from . import logic  # noqa: F401,E402  (issue 27: IsNaN for the attention of HF encoders)
from . import bool_mask  # noqa: F401,E402  (HF attention masks without bool tensors)

__all__ = ["APPROXIMATE", "EXACT", "KINDS", "REGISTRY", "RETRAIN", "Rule", "apply_rule",
           "apply_rule_to_graph", "rules_for"]
