"""Output directories: written whole in a temp directory beside them and swapped in, locked while a
run writes them, and replaced only when edgeconv can prove it wrote them (its marker with the list
of its files, :mod:`.ownership`); a directory that is not edgeconv's, and not empty, is refused
before any work.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadInput
from .fsutil import _UMASK, _deferred_syncs, glob_escape, remove_stale, _remove_empty, _syncing_in_background, _unwritable, make_dirs  # noqa: F401
from .ownership import (LOCK_SUFFIX, OUTPUT_MARKER, TEMP_MARKER, lock_owner, lock_text, mark_temp,  # noqa: F401
                        output_marker, pid_alive, refuse_unless_ours, remove_tree, stale_temp, unproven,
                        write_output_marker)


def output_path(raw: str | os.PathLike, flag: str = "-o", whole: bool = True) -> Path:
    """The directory ``raw`` (``-o``) names, checked before any work: BadInput for ``''`` and,
    when edgeconv replaces the directory ``whole`` (port, split), for ``.``, ``..`` and ``/``,
    which name no directory edgeconv could replace.  A symlink stands for the directory it names."""
    text = os.fspath(raw)
    if not str(text).strip():
        raise BadInput(f"{flag} '': give the output directory a name (e.g. {flag} out)")
    path = Path(text)
    if path.is_symlink():
        path = path.resolve()
    if not whole:
        path = Path(os.path.abspath(path))
    if path.name in ("", ".", ".."):
        raise BadInput(f"{flag} {text}: edgeconv writes into an output directory of its own, so it must name "
                       f"a new directory (e.g. {flag} out), not '{text}'")
    return path


def check_output_dir(raw: str | os.PathLike, flag: str = "-o", whole: bool = True) -> Path:
    """:func:`output_path`, then refused (one line, nothing touched) unless the directory is new,
    empty or written by edgeconv with every entry in it (:mod:`converter.infra.ownership`)."""
    path = output_path(raw, flag, whole)
    refuse_unless_ours(path)
    return path


@contextlib.contextmanager
def replace_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp directory beside ``path``; on success it *replaces* ``path`` as a whole.

    The complete directory is renamed over the old one (an atomic exchange where Linux has
    ``renameat2``), so a reader sees the old output or the new one, never a mix, and files of an
    earlier run do not survive.  A lock file beside ``path`` (``.<name>.edgeconv-lock``, held with
    ``flock``, so a killed run never leaves it locked) makes a second writer fail with a clear
    error instead of mixing outputs.  ``path`` is only replaced if it is empty or edgeconv wrote
    it and every file in it (:func:`converter.infra.ownership.refuse_unless_ours`), checked before
    anything changes; temp directories of dead runs are removed when they prove they are ours.
    """
    path = output_path(path)
    if path.exists() and not path.is_dir():
        raise BadInput(f"cannot write to {path}/: it is a file, not a directory")
    created = make_dirs(path.parent)
    try:
        with _locked(path):
            refuse_unless_ours(path)
            _remove_stale_siblings(path)
            try:
                tmp = mark_temp(Path(tempfile.mkdtemp(prefix=f".{path.name}.edgeconv-tmp-{os.getpid()}-",
                                                      dir=path.parent)))
                os.chmod(tmp, 0o777 & ~_UMASK)
            except OSError as err:
                raise _unwritable(path, err) from None
            finished = False
            try:
                with _syncing_in_background(tmp) as syncs:
                    yield tmp
                    (tmp / TEMP_MARKER).unlink()
                    write_output_marker(tmp, "output")
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


@contextlib.contextmanager
def output_collection(path: str | os.PathLike, files: tuple[str, ...] = ()) -> Iterator[Path]:
    """Hold directory ``path`` (locked) for a run that writes entries *into* it (a batch's job
    directories and summaries, ``port --to all``'s one directory per target): refused unless new,
    empty or edgeconv's; created and marked with ``files`` (the names this run writes directly in
    it; each subdirectory proves itself with its own marker); its stale temps removed."""
    path = output_path(path, whole=False)
    created = make_dirs(path.parent)
    try:
        with _locked(path):
            refuse_unless_ours(path)
            created += make_dirs(path)
            known = (output_marker(path) or {}).get("files", [])
            write_output_marker(path, "collection", [*known, *files])
            for entry in list(path.iterdir()):
                if stale_temp(entry) or (lock_owner(entry) is not None and not _lock_held(entry)):
                    remove_tree(entry)
            yield path
    finally:
        # made here and nothing written into it (every target failed): no empty directory left
        with contextlib.suppress(OSError):
            if path in created and os.listdir(path) == [OUTPUT_MARKER]:
                (path / OUTPUT_MARKER).unlink()
        _remove_empty(created)


def swap_in_dir(new: Path, path: Path) -> None:
    """Put directory ``new`` at ``path``, replacing an existing directory as a whole (the caller
    has proven it is edgeconv's: :func:`converter.infra.ownership.refuse_unless_ours`)."""
    if not path.exists() and not path.is_symlink():
        os.replace(new, path)
        return
    if not _exchange(new, path):
        old = path.with_name(f".{path.name}.edgeconv-old-{os.getpid()}-{os.urandom(4).hex()}")
        os.replace(path, old)
        os.replace(new, path)
        new = old
    remove_tree(new)  # after the exchange ``new`` holds the old output


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
    return path.with_name(f".{path.name}{LOCK_SUFFIX}")


def _open_lock(path: Path, lock: Path) -> int | None:
    """The lock file's descriptor: made new, or an existing one only when it is edgeconv's (None:
    it vanished between the two opens, its holder done: try again)."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(lock, flags | os.O_CREAT | os.O_EXCL, 0o666 & ~_UMASK)
    except FileExistsError:
        if lock_owner(lock) is None:
            if not lock.exists():
                return None
            raise BadInput(f"{lock} exists and is not an edgeconv lock file; move it away to write {path}/") from None
    try:
        return os.open(lock, flags)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    lock = _lock_path(path)
    while True:
        try:
            fd = _open_lock(path, lock)
        except OSError as err:
            raise _unwritable(path, err) from None
        if fd is None:
            continue  # its holder removed it between our two opens
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
        os.write(fd, lock_text())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _lock_held(lock: Path) -> bool:
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        words = os.pread(fd, 256, 0).decode().split()
        return int(words[1]) if len(words) > 1 else None
    except (OSError, ValueError):
        return None


def _remove_stale_siblings(path: Path) -> None:
    # Called with the lock held: no live run writes ``path``.  A temp directory of it is removed
    # when its marker proves it a dead run's; an old output when edgeconv wrote all of it.
    for prefix in (f".{path.name}.edgeconv-tmp-", f".{path.name}.edgeconv-old-"):
        for entry in path.parent.glob(glob_escape(prefix) + "*"):
            if stale_temp(entry) or (entry.is_dir() and not entry.is_symlink() and output_marker(entry) is not None
                                     and not unproven(entry)):
                remove_tree(entry)






def remove_stale_outputs(directory: Path, prefix: str) -> None:
    """Remove ``directory/<prefix><pid>-...`` entries of dead processes that prove they are
    edgeconv's: a temp directory (its marker), or an output directory edgeconv wrote whole."""
    for entry in Path(directory).glob(glob_escape(prefix) + "*"):
        head = entry.name[len(prefix):].split("-", 1)[0]
        if head.isdigit() and int(head) != os.getpid() and pid_alive(int(head)):
            continue
        if stale_temp(entry) or (entry.is_dir() and not entry.is_symlink() and output_marker(entry) is not None
                                 and not unproven(entry)):
            remove_tree(entry)
