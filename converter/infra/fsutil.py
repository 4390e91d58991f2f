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
import stat
import sys
import tempfile
from pathlib import Path
from collections.abc import Iterator

from ..errors import BadInput
from .ownership import (LOCK_SUFFIX, OUTPUT_MARKER, TEMP_MARKER, lock_owner, lock_text, mark_temp,  # noqa: F401
                        output_marker, pid_alive, refuse_unless_ours, remove_tree, stale_temp, unproven,
                        write_output_marker)

# mkstemp creates files 0600; outputs should get the usual permissions (0666 minus umask).
_UMASK = os.umask(0)
os.umask(_UMASK)


_NOT_REGULAR = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


def regular_file(path: str | os.PathLike, what: str = "input") -> Path:
    """``path`` if it is a regular file (symlinks followed); BadInput otherwise.  Only regular
    files are read: opening a FIFO or a device would wait forever, or read without end."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror or type(err).__name__})") from None
    if not stat.S_ISREG(mode):
        kind = _NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")
        raise BadInput(f"{path}: {kind}, not a regular file; a {what} must be a regular file")
    return path


def atomic_write_bytes(path: str | os.PathLike, data) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same directory + rename.

    ``data``: bytes, or a function writing them to the binary file it is given (streamed)."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"cannot write {path}: it is a directory; give a file name")
    make_dirs(path.parent)
    try:
        fd, tmp = _temp_file(path)
    except OSError as err:
        raise _unwritable(path, err) from None
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            syncs = _deferred_syncs(path)
            if syncs is None:
                os.fsync(f.fileno())
            else:
                syncs.start(f.fileno())
            if tmp is None:  # the anonymous file gets a name only now, complete
                tmp = _link_anonymous(f.fileno(), path)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(err, OSError):
            raise _unwritable(path, err) from None
        raise
    return path


#: Devices whose file system cannot give an anonymous file a name (then: named temp files).
_NO_ANONYMOUS: set[int] = set()


def _temp_file(path: Path) -> tuple[int, str | None]:
    """A file to write ``path``'s bytes into: anonymous (``O_TMPFILE``: a run killed while
    writing leaves nothing behind, so nothing is ever cleaned up by its name), or, where the file
    system has no anonymous files, a named temp file (fd, name)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            if os.stat(path.parent).st_dev not in _NO_ANONYMOUS:
                return os.open(path.parent, flag | os.O_RDWR, 0o666 & ~_UMASK), None
        except OSError:
            pass
    return tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)


def _link_anonymous(fd: int, path: Path) -> str:
    """Give the complete anonymous file ``fd`` a temp name beside ``path`` (renamed over it next);
    where the kernel will not link it, its bytes are copied into a named temp file."""
    for _ in range(100):
        tmp = str(path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp"))
        if _linkat_empty_path(fd, tmp):
            return tmp
        try:
            os.link(f"/proc/self/fd/{fd}", tmp, follow_symlinks=True)
            return tmp
        except FileExistsError:
            continue
        except OSError:
            break
    _NO_ANONYMOUS.add(os.fstat(fd).st_dev)
    out, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        offset, size = 0, os.fstat(fd).st_size
        while offset < size:
            offset += os.write(out, os.pread(fd, min(size - offset, 1 << 24), offset))
        os.fsync(out)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        os.close(out)
    return tmp


def _linkat_empty_path(fd: int, name: str) -> bool:
    """``linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH)`` (needs CAP_DAC_READ_SEARCH)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.linkat(fd, b"", -100, os.fsencode(name), 0x1000) == 0
    except (OSError, AttributeError):
        return False


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """``dst`` as a byte copy of ``src``, written atomically; the kernel copies (``sendfile``), so
    the bytes never pass through (freshly allocated) process memory."""
    def copy(out) -> None:
        out.flush()
        with open(src, "rb") as f:
            size, offset = os.fstat(f.fileno()).st_size, 0
            try:
                while offset < size:
                    sent = os.sendfile(out.fileno(), f.fileno(), offset, size - offset)
                    if sent == 0:
                        break
                    offset += sent
            except OSError:  # a file system without file-to-file sendfile: copy through memory
                if offset:
                    raise
                shutil.copyfileobj(f, out, 1 << 20)

    return atomic_write_bytes(dst, copy)


class _Syncs:
    """The ``fsync`` of each file written into a directory that is published only as a whole
    (:func:`replace_output_dir`): one thread syncs them in turn while the port goes on (the disk
    writes overlap the next stage instead of stalling it), and all are done before the directory
    is published, so a crash still never leaves a partial file in an output."""

    def __init__(self):
        self._queue = None
        self._worker = None
        self._errors: list[OSError] = []

    def start(self, fd: int) -> None:
        own = os.dup(fd)  # the writer closes its descriptor; this one is the thread's
        if self._worker is None:
            import queue
            import threading

            self._queue = queue.SimpleQueue()
            self._worker = threading.Thread(target=self._run, name="edgeconv-fsync", daemon=True)
            self._worker.start()
        self._queue.put(own)

    def _run(self) -> None:
        while (fd := self._queue.get()) is not None:
            try:
                os.fsync(fd)
            except OSError as err:
                self._errors.append(err)
            finally:
                os.close(fd)

    def wait(self) -> None:
        """Every file synced (the thread ends); the first failure raised."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
        if self._errors:
            raise self._errors[0]


#: Directories being built by :func:`replace_output_dir` (absolute path -> their syncs).
_BUILDING: dict[str, _Syncs] = {}


def _deferred_syncs(path: Path) -> _Syncs | None:
    """The syncs of the innermost directory being built that ``path`` lies in (None: none)."""
    if not _BUILDING:
        return None
    where = os.path.abspath(path)
    inside = [d for d in list(_BUILDING) if where.startswith(d + os.sep)]
    return _BUILDING.get(max(inside, key=len)) if inside else None


@contextlib.contextmanager
def _syncing_in_background(directory: Path) -> Iterator[_Syncs]:
    key = os.path.abspath(directory)
    syncs = _BUILDING[key] = _Syncs()
    try:
        yield syncs
    finally:
        _BUILDING.pop(key, None)
        with contextlib.suppress(OSError):
            syncs.wait()  # on the error path too: no thread outlives the directory's run


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
        remove_stale(path, ".edgeconv-")
        tmp = mark_temp(Path(tempfile.mkdtemp(prefix=f".edgeconv-{os.getpid()}-", dir=path)))
    except OSError as err:
        _remove_empty(created)
        raise _unwritable(path, err) from None
    finished = False
    try:
        yield tmp
        (tmp / TEMP_MARKER).unlink()
        for src in sorted(tmp.rglob("*")):
            if src.is_dir():
                continue
            dst = path / src.relative_to(tmp)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_dir() and not dst.is_symlink():  # never a directory's files for one file
                raise BadInput(f"cannot write {dst}: it is a directory")
            os.replace(src, dst)
        finished = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not finished:
            _remove_empty(created)


_SWEPT: set[Path] = set()


@contextlib.contextmanager
def private_temp_dir(what: str) -> Iterator[Path]:
    """A temp directory ``$TMPDIR/edgeconv-<what>-<pid>-XXXX``, removed on exit; the ones killed
    runs (``kill -9``) left behind, of every kind, are removed first (once per process), when
    their marker proves them a dead run's."""
    base = Path(tempfile.gettempdir())
    if base not in _SWEPT:  # once per process (TMPDIR may hold thousands of entries), every kind
        _SWEPT.add(base)
        remove_stale(base, "edgeconv-")
    tmp = mark_temp(Path(tempfile.mkdtemp(prefix=f"edgeconv-{what}-{os.getpid()}-", dir=base)))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)



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


#: Digests of files already read or hashed, by the file's identity: functions returning them
#: (:func:`remember_sha256` hashes in a thread).
_DIGESTS: dict[tuple, object] = {}
#: Files at least this big are hashed in a thread (hashlib releases the GIL) while the reader
#: goes on parsing what it read.
_THREAD_HASH_BYTES = 1 << 20


def _identity(status: os.stat_result) -> tuple:
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def meanwhile(compute, name: str, background: bool = True):
    """``compute()`` started now in a daemon thread (work that releases the GIL: hashing); returns
    a function that waits for its result, or computes it there if the thread failed.  Not
    ``background``: computed right away."""
    if not background:
        value = compute()
        return lambda: value
    import threading

    result: list = []
    worker = threading.Thread(target=lambda: result.append(compute()), name=name, daemon=True)
    worker.start()

    def wait():
        worker.join()
        return result[0] if result else compute()
    return wait


def remember_sha256(path: str | os.PathLike, status: os.stat_result, data: bytes) -> None:
    """``data`` is the whole content of ``path`` (``status``: its ``fstat`` when read): a later
    :func:`sha256_file` of the unchanged file takes the digest of these bytes (hashed in a thread
    while the reader parses them) instead of reading the file again."""
    if len(data) == status.st_size:
        _DIGESTS[_identity(status)] = meanwhile(lambda: hashlib.sha256(data).hexdigest(), "edgeconv-sha256",
                                                background=len(data) >= _THREAD_HASH_BYTES)


def sha256_file(path: str | os.PathLike) -> str:
    """The file's digest, computed once per file identity (a port hashes a torch file while its
    child process loads it, and the report asks again later)."""
    identity = _identity(os.stat(path))
    known = _DIGESTS.get(identity)
    if known is not None:
        return known()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    _DIGESTS[identity] = lambda: digest
    return digest


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)


def remove_stale(directory: Path, prefix: str) -> None:
    """Remove the temp directories ``directory/<prefix>*`` of runs killed with ``kill -9``: only
    those whose temp marker proves edgeconv made them, in a process that is gone."""
    try:
        entries = list(Path(directory).glob(glob_escape(prefix) + "*"))
    except OSError:
        return
    for entry in entries:
        if stale_temp(entry):
            remove_tree(entry)
