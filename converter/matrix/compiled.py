"""The packaged matrix parsed once: a ``marshal`` cache beside it, like Python's ``.pyc`` files.

Reading ``op_support_matrix.yaml`` (compose with line marks, build plain dicts) and validating it
cost more than the rest of a small model's port.  After the first load, the parsed document and
its line map are kept in ``converter/data/__pycache__/`` as marshal data (plain dicts, lists,
tuples, strings and numbers: nothing is executed when it is read back), keyed by the SHA-256 of
the YAML text *and* of the reader and validator sources, so an edited matrix or an edited schema
is parsed and validated again, never served stale.  A cache entry is only written for a matrix
that validated; a missing, unreadable or foreign-Python cache is ignored.  As for ``.pyc`` files,
nothing is written when Python is told not to write bytecode (``PYTHONDONTWRITEBYTECODE``) or
the package directory is read-only.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path

from .loader import Lines

#: The modules whose code decides what a parsed, valid matrix is.
_READER_SOURCES = ("loader.py", "schema.py", "constraints.py", "values.py", "patterns.py", "kinds_io.py",
                   "citations.py")
_FORMAT = 1


def _cache_path(yaml_path: Path) -> Path:
    tag = sys.implementation.cache_tag or "python"
    return yaml_path.parent / "__pycache__" / f"{yaml_path.name}.{tag}.m{marshal.version}.marshal"


def _key(yaml_bytes: bytes) -> bytes:
    h = hashlib.sha256(yaml_bytes)
    here = Path(__file__).parent
    for name in _READER_SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    h.update(str(_FORMAT).encode())
    return h.digest()


def load(yaml_path: Path) -> tuple[dict, Lines, bytes] | tuple[None, None, bytes]:
    """``(data, lines, key)`` from the cache when it holds this exact, validated matrix, else
    ``(None, None, key)``; ``key`` is what :func:`store` files a fresh parse under."""
    key = _key(yaml_path.read_bytes())
    try:
        entry = marshal.loads(_cache_path(yaml_path).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None, None, key
    if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == key):
        return None, None, key
    return entry[1], entry[2], key


def store(yaml_path: Path, key: bytes, data: dict, lines: Lines) -> None:
    """Keep the parsed, validated matrix for the next process (best effort, atomic)."""
    if sys.dont_write_bytecode:
        return
    path = _cache_path(yaml_path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        blob = marshal.dumps((key, data, lines))
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass
