"""The one loop every exporter lowers its graph with, and the one error mapping it applies.

For each node, in the order given (topological):

1. ``ops.skip`` — op types the target lowers to nothing (``Constant``: consumers read the value);
2. the custom-layer hook — a node that :func:`converter.custom.custom_nodes_of` marks (remedy 4)
   goes to the target's ``custom(ctx, node, layer, attrs)``;
3. the domain check — only ``""`` / ``"ai.onnx"`` ops, plus the registry's ``foreign`` op types;
4. lookup in the target's :class:`~.registry.OpRegistry`, and the call ``handler(ctx, node)``.

Errors: an :class:`~converter.errors.EdgeconvError` a handler raises propagates as it is (it
already says what is wrong).  A ``KeyError``/``IndexError``/``TypeError``/``ValueError``/
``AssertionError``/``NotImplementedError`` escaping a handler means the mapping met a case it
does not handle (a missing attribute, an unexpected rank, a builder's type check): it becomes
``Unsupported("<Target> cannot express node 'n' (Op): ...")``, exit code 3 on every target.
Anything else is a bug in edgeconv and surfaces as an internal error.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Iterable

from ..errors import EdgeconvError, Unsupported
from .registry import OpRegistry

#: What a handler raises when it meets a case its mapping does not cover.
MAPPING_ERRORS = (KeyError, IndexError, TypeError, ValueError, AssertionError, NotImplementedError)

#: ``custom(ctx, node, layer, attrs)``: write a marked node as the custom layer ``layer``.
CustomHook = Callable[[Any, Any, str, dict], None]

ONNX_DOMAINS = ("", "ai.onnx")


def cannot_express(title: str, node, why: str) -> Unsupported:
    """The one wording of "this target cannot write this node" (``node=None``: the model)."""
    if node is None:
        return Unsupported(f"{title}: {why}")
    return Unsupported(f"{title} cannot express node '{node.name}' ({node.op}): {why}")


class NodeContext:
    """What the driver needs from a target's lowering context: the node being lowered.

    Subclasses set ``title`` (the target's name in messages) and may extend :meth:`begin`."""

    title = "target"
    node = None

    def begin(self, node) -> None:
        """Called by the driver before each node is lowered (``None`` after the last)."""
        self.node = node

    def unsupported(self, why: str) -> Unsupported:
        """An :class:`Unsupported` naming the current node: ``raise ctx.unsupported("...")``."""
        return cannot_express(self.title, self.node, why)


def lower_nodes(ops: OpRegistry, ctx: NodeContext, nodes: Iterable, *, model=None,
                custom: CustomHook | None = None) -> None:
    """Lower ``nodes`` (topological order) through ``ops`` into ``ctx``.

    ``model`` + ``custom``: nodes the model marks as custom layers go to ``custom``; a target
    without custom layers passes ``custom=None`` and the marks are ignored here (the pipeline
    refuses such a port before exporting)."""
    marks = {}
    if custom is not None and model is not None:
        from ..custom import custom_nodes_of

        marks = custom_nodes_of(model)
    for node in nodes:
        if node.op in ops.skip:
            continue
        ctx.begin(node)
        if node.name in marks:  # remedy (4): a layer type the app registers with the runtime
            mark = marks[node.name]
            _call(ops, node, custom, ctx, node, mark["layer"], mark["attrs"])
            continue
        if (node.domain or "") not in ONNX_DOMAINS and node.op not in ops.foreign:
            raise cannot_express(ops.title, node, f"{ops.title} maps only ONNX ops (domain '{node.domain}')")
        handler = ops.get(node.op)
        if handler is None:
            raise cannot_express(ops.title, node, ops.missing)
        _call(ops, node, handler, ctx, node)
    ctx.begin(None)


def _call(ops: OpRegistry, node, fn, *args) -> None:
    try:
        fn(*args)
    except EdgeconvError:
        raise
    except MAPPING_ERRORS as err:
        # the handler's or the library's own words; never the exception's type (issue 27)
        detail = str(err).splitlines()[0] if str(err) else ""
        raise cannot_express(ops.title, node, f"cannot be mapped: {detail}"
                             if detail else "cannot be mapped (its mapping stopped without a message)") from err
