"""Stage 3, legalization: check every node against the matrix (``check``), plan a remedy per
unsupported node (``plan``, with ``neighbourhood`` and ``partition``), apply it (``apply``) with the
rules of ``rewrites``.

``from converter.legalize.apply import legalize`` is :func:`converter.legalize.apply.apply.legalize`.
"""


def __getattr__(name: str):
    if name in ("legalize", "LegalizeResult"):
        import importlib

        return getattr(importlib.import_module(".apply", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
