"""One registry of op handlers per target, filled by one decorator.

Every exporter maps ONNX ops the same way: a family module (``ops_nn.py``, ``layers_shape.py``,
...) decorates one small function per op::

    OPS = OpRegistry("tnn", title="TNN", skip={"Constant"}, missing="no TNN layer type for this op")

    @OPS.register("Conv", "ConvInteger")
    def conv(ctx, node) -> None:
        ...

``handler(ctx, node) -> None``: ``ctx`` is the target's lowering context (it knows the node
being lowered as ``ctx.node``), ``node`` the onnx-graphsurgeon node.  :func:`lower_nodes` in
``driver.py`` walks the graph and calls them.  Registering an op twice in one registry raises
:class:`DuplicateRegistration` when the second module is imported, so two families can never
silently fight over an op.

The same class keys the readers' tables (TNN layer type ids, MACE op types): any hashable key.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any
from collections.abc import Callable

Handler = Callable[[Any, Any], None]


class DuplicateRegistration(Exception):
    """An op registered twice in one registry (a programming error, raised at import time)."""


class OpRegistry(Mapping):
    """op -> handler for one target (read-only as a mapping; fill it with :meth:`register`).

    ``title``     how messages name the target ("TFLite", "TNN", "MACE", "CoreML");
    ``skip``      op types the target lowers to nothing (``Constant``: consumers read the value);
    ``foreign``   op types accepted from any domain (TFLite's fused ``Gelu``);
    ``missing``   the reason given for an op without a handler.
    """

    def __init__(self, target: str, *, title: str | None = None, skip: frozenset[str] | set[str] = frozenset(),
                 foreign: frozenset[str] | set[str] = frozenset(), missing: str | None = None):
        self.target = target
        self.title = title or target
        self.skip = frozenset(skip)
        self.foreign = frozenset(foreign)
        self.missing = missing or f"no {self.title} mapping for this op"
        #: The table itself (tests may monkeypatch entries of this dict).
        self.handlers: dict[Hashable, Handler] = {}

    def register(self, *ops: Hashable) -> Callable[[Handler], Handler]:
        """Decorator: ``handler`` lowers every op in ``ops``.  Also usable on a made handler:
        ``OPS.register("Add")(binary("ADD"))``."""
        if not ops:
            raise TypeError("register() needs at least one op")

        def add(handler: Handler) -> Handler:
            for op in ops:
                if op in self.handlers:
                    raise DuplicateRegistration(
                        f"{self.target}: op {op!r} is registered twice "
                        f"({_where(self.handlers[op])} and {_where(handler)})")
                self.handlers[op] = handler
            return handler

        return add

    def __getitem__(self, op: Hashable) -> Handler:
        return self.handlers[op]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.handlers)

    def __len__(self) -> int:
        return len(self.handlers)

    def __repr__(self) -> str:
        return f"OpRegistry({self.target!r}, {len(self.handlers)} ops)"


def _where(handler: Handler) -> str:
    module = getattr(handler, "__module__", None) or "?"
    return f"{module}.{getattr(handler, '__qualname__', repr(handler))}"
