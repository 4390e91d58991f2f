"""What edgeconv can prove it wrote, so that it deletes or replaces nothing else.

A name is never proof (a user may well own ``out/.old-x`` or ``d/.edgeconv-notes``).  An entry is
edgeconv's only when it carries content edgeconv wrote for that purpose:

* an *output directory* (``port -o``, ``split -o``, a batch job, the batch directory itself) holds
  :data:`OUTPUT_MARKER`, a JSON file with the format tag ``edgeconv-output/2``, the id of the run
  that wrote it and the list of the files it wrote.  A file in it that the list does not name is
  the user's: the directory is then refused as a whole, and nothing in it changes;
* a *temp directory* holds :data:`TEMP_MARKER` (``edgeconv-temp/1``, run id, pid), written right
  after the directory was made; it is stale, and removable, once that process is gone;
* a *lock file* (``.NAME.edgeconv-lock``) holds ``edgeconv-lock/1 <pid> <run id>``.

An empty directory holds nothing to lose; a directory edgeconv did not make and that is not empty
is refused (:func:`refuse_unless_ours`) before any work.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path

from ..errors import BadInput

#: The marker of a directory edgeconv wrote (the list of its files inside).
OUTPUT_MARKER = ".edgeconv-output"
OUTPUT_FORMAT = "edgeconv-output/2"
#: The marker of a temp directory, written right after it was made.
TEMP_MARKER = ".edgeconv-temp"
TEMP_FORMAT = "edgeconv-temp/1"
LOCK_SUFFIX = ".edgeconv-lock"
LOCK_FORMAT = "edgeconv-lock/1"
#: This process's run id: in every marker and lock file it writes.
RUN_ID = uuid.uuid4().hex
#: Markers are small; a bigger file under the name is not one of ours.
_MARKER_MAX_BYTES = 16 << 20


def _read_json(path: Path, fmt: str) -> dict | None:
    """The marker at ``path`` if it is a regular file holding edgeconv's JSON of format ``fmt``."""
    try:
        status = os.lstat(path)
        if not (path.is_file() and not path.is_symlink()) or status.st_size > _MARKER_MAX_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != fmt or not isinstance(data.get("run"), str):
        return None
    return data


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ output dirs


def files_under(directory: Path) -> list[str]:
    """Every file (and symlink) under ``directory`` as a relative POSIX path, sorted; the
    directory's own output and temp markers left out."""
    out = []
    for root, dirs, files in os.walk(directory):
        base = Path(root).relative_to(directory)
        out += [(base / name).as_posix() for name in files]
        out += [(base / name).as_posix() for name in dirs if (Path(root) / name).is_symlink()]
    return sorted(p for p in out if p not in (OUTPUT_MARKER, TEMP_MARKER))


def write_output_marker(directory: Path, kind: str, files: list[str] | None = None) -> None:
    """Mark ``directory`` as edgeconv's: ``files`` (default: every file now under it) are what
    this run wrote there; a later run replaces exactly those (and refuses anything else)."""
    listed = files_under(directory) if files is None else sorted(set(files))
    _write_json(directory / OUTPUT_MARKER, {"format": OUTPUT_FORMAT, "run": RUN_ID, "kind": kind,
                                            "files": listed})


def output_marker(directory: Path) -> dict | None:
    data = _read_json(Path(directory) / OUTPUT_MARKER, OUTPUT_FORMAT)
    if data is None or not isinstance(data.get("files"), list):
        return None
    return data


def unproven(directory: Path) -> list[str]:
    """The entries under ``directory`` (relative paths) edgeconv cannot prove it wrote; empty when
    every one is provably edgeconv's (or the directory is empty)."""
    marker = output_marker(directory)
    listed = set(marker["files"]) if marker else set()
    return _walk(Path(directory), "", listed, marker is not None)


def _walk(root: Path, prefix: str, listed: set[str], marked: bool) -> list[str]:
    found = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return [prefix or "."]
    for entry in entries:
        rel, path = prefix + entry.name, Path(entry.path)
        if (marked and rel == OUTPUT_MARKER) or rel in listed or lock_owner(path) is not None:
            continue
        if entry.is_dir(follow_symlinks=False):
            if temp_owner(path) is not None:
                continue  # a temp directory: ours, stale or in use
            if output_marker(path) is not None:
                found += [f"{rel}/{p}" for p in unproven(path)]
            else:
                found += _walk(path, rel + "/", listed, marked)
        else:
            found.append(rel)
    return found


def refuse_unless_ours(path: Path, what: str = "edgeconv replaces only directories it wrote") -> None:
    """BadInput (one line) unless ``path`` is new, empty, or a directory edgeconv wrote whose every
    entry it can prove it wrote.  Reads only: nothing is created or removed."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir():
        raise BadInput(f"cannot write to {path}/: it is a file, not a directory")
    foreign = unproven(path)
    if not foreign:
        return
    more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
    if output_marker(path) is None:
        raise BadInput(f"{path}/ is not empty and was not written by edgeconv (no valid {OUTPUT_MARKER} inside; "
                       f"it holds {foreign[0]}{more}); {what}: give a new or empty directory")
    raise BadInput(f"{path}/ holds {foreign[0]}{more}, which edgeconv did not write there; {what}: move it "
                   "away or give a new or empty directory")


# ------------------------------------------------------------------------------- temp dirs


def mark_temp(directory: Path) -> Path:
    """Write the proof that ``directory`` (just made) is this process's temp directory."""
    _write_json(Path(directory) / TEMP_MARKER, {"format": TEMP_FORMAT, "run": RUN_ID, "pid": os.getpid()})
    return Path(directory)


def temp_owner(directory: Path) -> int | None:
    """The pid that made temp directory ``directory``, or None when it carries no proof."""
    data = _read_json(Path(directory) / TEMP_MARKER, TEMP_FORMAT)
    pid = data.get("pid") if data else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


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


def stale_temp(entry: Path) -> bool:
    """A real directory holding a temp marker whose process is gone."""
    if entry.is_symlink() or not entry.is_dir():
        return False
    pid = temp_owner(entry)
    return pid is not None and pid != os.getpid() and not pid_alive(pid)


def remove_tree(entry: Path) -> None:
    """Remove ``entry`` (a directory tree, a file or a symlink; never a symlink's target)."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


# ------------------------------------------------------------------------------ lock files


def lock_text() -> bytes:
    return f"{LOCK_FORMAT} {os.getpid()} {RUN_ID}\n".encode()


def lock_owner(path: Path) -> int | None:
    """The pid recorded in lock file ``path`` (0: an empty file, as a run killed right after
    creating it leaves it), or None when ``path`` is not an edgeconv lock file."""
    if not path.name.endswith(LOCK_SUFFIX):
        return None
    try:
        if path.is_symlink() or not path.is_file() or os.path.getsize(path) > 256:
            return None
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    if not text:
        return 0
    words = text.split()
    return int(words[1]) if len(words) == 3 and words[0] == LOCK_FORMAT and words[1].isdigit() else None
