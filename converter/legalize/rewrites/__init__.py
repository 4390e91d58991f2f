"""Rewrite rules, one module per family; importing this package registers them all.

    from converter.legalize.rewrites import REGISTRY, rules_for, apply_rule
"""

from __future__ import annotations

from . import (activations, arithmetic, cleanup, conv_nd, convtranspose, crop, deconv, decompose,  # noqa: F401
               einsum, fold, groups, linear, pad, rank)  # importing a module registers its rules
from .base import (APPROXIMATE, EXACT, KINDS, REGISTRY, RETRAIN, Rule, apply_rule,
                   apply_rule_to_graph, rules_for)

__all__ = ["APPROXIMATE", "EXACT", "KINDS", "REGISTRY", "RETRAIN", "Rule", "apply_rule",
           "apply_rule_to_graph", "rules_for"]
