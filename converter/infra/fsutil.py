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
from collections.abc import Iterator

from ..errors import BadInput

# mkstemp creates files 0600; outputs should get the usual permissions (0666 minus umask).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same directory + rename.

    ``data``: bytes, or a function writing them to the binary file it is given (streamed)."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"cannot write {path}: it is a directory; give a file name")
    make_dirs(path.parent)
    try:
        remove_stale(path.parent, f".{path.name}.", suffix=".tmp")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
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
        remove_stale(path, ".edgeconv-", legacy=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".edgeconv-{os.getpid()}-", dir=path))
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


#: The file that says "edgeconv wrote this directory": only such a directory (or an empty one)
#: is replaced by a later run.  Never a user's unrelated directory.
OUTPUT_MARKER = ".edgeconv-output"


@contextlib.contextmanager
def replace_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside ``path``; on success it *replaces* ``path`` as a whole.

    The complete directory is renamed over the old one (an atomic exchange where Linux has
    ``renameat2``), so a reader sees the old output or the new one, never a mix, and files of an
    earlier run do not survive.  A lock file beside ``path`` (``.<name>.edgeconv-lock``, held with
    ``flock``, so a killed run never leaves it locked) makes a second writer fail with a clear
    error instead of mixing outputs.  ``path`` is only replaced if edgeconv made it (it holds
    :data:`OUTPUT_MARKER`) or it is empty; temp directories of dead runs are removed.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInput(f"cannot write to {path}/: it is a file, not a directory")
    created = make_dirs(path.parent)
    try:
        with _locked(path):
            _remove_stale_siblings(path)
            if path.is_dir():
                remove_stale(path, ".edgeconv-", legacy=True)  # temp directories of killed older runs
                if not (path / OUTPUT_MARKER).exists() and any(path.iterdir()):
                    raise BadInput(f"{path}/ is not empty and was not written by edgeconv (no {OUTPUT_MARKER} "
                                   "inside); edgeconv replaces its output directory as a whole, so give a new "
                                   "or empty directory")
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.edgeconv-tmp-{os.getpid()}-", dir=path.parent))
                os.chmod(tmp, 0o777 & ~_UMASK)
            except OSError as err:
                raise _unwritable(path, err) from None
            finished = False
            try:
                with _syncing_in_background(tmp) as syncs:
                    yield tmp
                    (tmp / OUTPUT_MARKER).write_text("written by edgeconv; the next run into this directory replaces "
                                                     "it as a whole\n", encoding="utf-8")
                    try:
                        syncs.wait()
                    except OSError as err:
                        raise _unwritable(path, err) from None
                swap_in_dir(tmp, path)
                finished = True
            finally:
                if not finished:
                    shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        _remove_empty(created)
        raise


def swap_in_dir(new: Path, path: Path) -> None:
    """Put directory ``new`` at ``path``, replacing an existing directory as a whole."""
    if not path.exists():
        os.replace(new, path)
        return
    if not _exchange(new, path):
        old = path.with_name(f".{path.name}.edgeconv-old-{os.getpid()}-{os.urandom(4).hex()}")
        os.replace(path, old)
        os.replace(new, path)
        new = old
    _remove(new)  # after the exchange ``new`` holds the old output (or the old symlink)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2 RENAME_EXCHANGE); False if unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.edgeconv-lock")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    lock = _lock_path(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        except OSError as err:
            raise _unwritable(path, err) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise BadInput(f"{path}/ is being written by another edgeconv run{who} (lock file {lock.name}); "
                           "wait for it to finish or choose another output directory") from None
        # The previous holder may have removed the file between our open and our lock: retry.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or "0") or None
    except (OSError, ValueError):
        return None


def _remove_stale_siblings(path: Path) -> None:
    # Called with the lock held: no live run writes ``path``, so every temp of it is stale.
    for prefix in (f".{path.name}.edgeconv-tmp-", f".{path.name}.edgeconv-old-"):
        for stale in path.parent.glob(glob_escape(prefix) + "*"):
            _remove(stale)


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except (OSError, OverflowError):
        return False
    return True


def remove_stale(directory: Path, prefix: str, suffix: str = "", legacy: bool = False) -> None:
    """Remove ``directory/<prefix><pid>-...<suffix>`` entries whose process is gone: the temp
    files and directories of a run killed with ``kill -9``.  ``legacy``: entries without a pid
    (older versions' names) are removed too.  A live process's entries are left alone."""
    try:
        entries = list(Path(directory).glob(glob_escape(prefix) + "*" + glob_escape(suffix)))
    except OSError:
        return
    for entry in entries:
        if entry.name == OUTPUT_MARKER:
            continue
        head = entry.name[len(prefix):].split("-", 1)[0].split(".", 1)[0]
        pid = int(head) if head.isdigit() else None
        if pid is None and not legacy:
            continue
        if pid is not None and (pid == os.getpid() or pid_alive(pid)):
            continue
        _remove(entry)


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
