"""Atomic file output: a reader never sees a partial file, a crash never leaves one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

# mkstemp creates files 0600; outputs should get the usual permissions (0666 minus umask).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same directory + rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory; on success its files replace those in ``path``.

    Files are moved in one by one with ``os.replace`` (atomic per file); on failure the
    temp directory is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".edgeconv-", dir=path))
    try:
        yield tmp
        for src in sorted(tmp.rglob("*")):
            if src.is_dir():
                continue
            dst = path / src.relative_to(tmp)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_dir():
                shutil.rmtree(dst)
            os.replace(src, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
