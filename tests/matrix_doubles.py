"""Matrix doubles for planner and legalization tests: the real matrix's interface
(``supports_op``, ``check_node``) with a verdict rule simple enough to reason about in a test."""

from __future__ import annotations

from converter.matrix import NodeVerdict


class OpSetMatrix:
    """A matrix that rejects exactly the listed op types (every node, any shape)."""

    def __init__(self, missing):
        self.missing = set(missing)

    def supports_op(self, framework, hw, op):
        return op not in self.missing

    def check_node(self, node, framework, hw):
        ok = node.op not in self.missing
        return NodeVerdict(node.name, node.op, "supported" if ok else "unsupported",
                           "ok" if ok else f"{node.op}: missing here", None, None, None)
