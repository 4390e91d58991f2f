"""Atomic file output: a reader never sees a partial file, a crash never leaves one.

An output path the user cannot write (a file where a directory should be, a read-only
directory, a full disk) is a :class:`~converter.errors.BadInput` naming the path, not an
``OSError`` traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import BadInput

# mkstemp creates files 0600; outputs should get the usual permissions (0666 minus umask).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same directory + rename."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"cannot write {path}: it is a directory; give a file name")
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _unwritable(path, err) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _unwritable(path, err) from None
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory; on success its files replace those in ``path``.

    Files are moved in one by one with ``os.replace`` (atomic per file); on failure the
    temp directory is removed, ``path`` keeps its old files, and directories created for it
    are removed again (a failed run leaves no empty output directory behind).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInput(f"cannot write to {path}/: it is a file, not a directory")
    created = make_dirs(path)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".edgeconv-", dir=path))
    except OSError as err:
        _remove_empty(created)
        raise _unwritable(path, err) from None
    finished = False
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
        finished = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not finished:
            _remove_empty(created)


def make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; returns the directories it created, outermost first."""
    missing = []
    probe = Path(path)
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise BadInput(f"cannot create {path}/: {probe} is a file, not a directory")
    created = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # made concurrently (parallel batch jobs): fine
        except OSError as err:
            _remove_empty(created)
            raise _unwritable(directory, err) from None
        created.append(directory)
    return created


def _remove_empty(directories: list[Path]) -> None:
    for directory in reversed(directories):
        with contextlib.suppress(OSError):
            directory.rmdir()  # only succeeds when empty: never removes someone's files


def _unwritable(path: Path, err: OSError) -> BadInput:
    return BadInput(f"cannot write {path}: {err.strerror or type(err).__name__}")


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Inside the block, native code's writes to file descriptor 2 go to /dev/null while
    Python's ``sys.stderr`` (our error line, warnings, progress) still reaches the terminal.

    For C++ libraries that log to fd 2 directly, past ``sys.stderr`` and every Python logger:
    LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." when an interpreter
    is created, TensorFlow's absl start-up lines.  edgeconv promises one line on stderr.
    """
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        real = os.dup(2)
    except OSError:  # no fd 2 at all (a daemon): nothing to silence
        yield
        return
    python_stderr = sys.stderr
    stream = os.fdopen(real, "w", buffering=1, encoding=getattr(python_stderr, "encoding", None) or "utf-8",
                       errors="backslashreplace")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = stream
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            stream.flush()
        os.dup2(stream.fileno(), 2)
        sys.stderr = python_stderr
        stream.close()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
