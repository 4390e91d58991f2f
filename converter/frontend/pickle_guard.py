"""Look inside model archives for pickles *before* torch or numpy unpickles anything.

Unpickling runs code: a pickle names callables (``GLOBAL``/``STACK_GLOBAL``) that the
unpickler imports and calls.  torch's loaders unpickle parts of an archive with
``weights_only=False`` (``torch.export.load``: constants and weights marked ``use_pickle``,
custom and opaque objects, legacy ``.pt`` members, sample inputs after a failed safe load), so
a crafted file runs a command during ``edgeconv inspect``.  This module reads the pickle
opcodes without executing them and lists every callable a pickle would import; anything outside
the small set a plain tensor archive needs is refused unless the user passes ``--trust-pickle``.

Nothing here imports torch or numpy.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from pathlib import Path

from ..errors import BadInput

#: (module, name) pairs a tensor/state-dict pickle needs; the same idea as torch's
#: ``weights_only`` unpickler, decided here without importing torch.
_ALLOWED_EXACT = {
    ("collections", "OrderedDict"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"),
    ("builtins", "bytearray"), ("_codecs", "encode"),
    ("torch", "Size"), ("torch", "device"), ("torch", "dtype"),
    ("torch.nn.parameter", "Parameter"),
    ("torch.storage", "UntypedStorage"), ("torch.storage", "TypedStorage"),
    ("torch._tensor", "_rebuild_from_type_v2"), ("torch.serialization", "_get_layout"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
}
_DTYPE_NAMES = {"float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
                "complex64", "complex128", "half", "float", "double", "long", "int", "short", "uint16", "uint32",
                "uint64", "float8_e4m3fn", "float8_e5m2", "contiguous_format", "channels_last", "preserve_format",
                "strided", "sparse_coo"}


def _allowed(module: str, name: str, torchscript: bool) -> bool:
    if (module, name) in _ALLOWED_EXACT:
        return True
    if module == "torch" and (name.endswith("Storage") or name in _DTYPE_NAMES):
        return True
    if module == "torch._utils" and name.startswith("_rebuild_"):
        return True
    if module == "torch.jit._pickle" and (name.startswith("build_") or name == "restore_type_tag"):
        return True
    if module.startswith("numpy.dtypes") and name.endswith("DType"):
        return True
    # TorchScript's own unpickler (C++) resolves __torch__ classes to compiled TorchScript
    # types; it never imports a Python module.
    return torchscript and module.startswith("__torch__")


def pickle_globals(data: bytes) -> tuple[list[tuple[str, str]], bool]:
    """The ``(module, name)`` of every callable the pickle would import, in order, and whether
    the opcodes parsed up to ``STOP`` (an unpickler runs what it read before a damaged part)."""
    found: list[tuple[str, str]] = []
    strings: list[str | None] = []  # the value each push put on the stack, for STACK_GLOBAL
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                found.append((module, attr))
            elif name in ("EXT1", "EXT2", "EXT4"):  # a global by copyreg extension code
                found.append(("copyreg-extension", str(arg)))
            elif name == "STACK_GLOBAL":
                module, attr = (strings[-2], strings[-1]) if len(strings) >= 2 else (None, None)
                found.append((module or "?", attr or "?"))
            elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
                          "BINSTRING", "STRING"):
                strings.append(str(arg))
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = strings[-1] if strings else None
            elif name == "MEMOIZE":
                memo[len(memo)] = strings[-1] if strings else None
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                strings.append(memo.get(int(arg)))
            elif name == "STOP":
                return found, True
            else:
                strings.append(None)
    except Exception:  # noqa: BLE001 - truncated or not a pickle
        pass
    return found, False


def _is_pickle(data: bytes) -> bool:
    # Protocol 2+ pickles start with PROTO; protocol 0/1 ones (legacy torch) with an opcode
    # such as '(' (MARK), '}' (EMPTY_DICT), 'c' (GLOBAL) or ']' (EMPTY_LIST).
    return len(data) >= 2 and (data[0] == 0x80 and data[1] <= 5 or data[:1] in (b"c", b"(", b"}", b"]", b"\x8a"))


#: Members of a .pt2 that torch.export.load always unpickles, by file-name prefix.
_PT2_PICKLED_PREFIXES = ("custom_obj", "opaque_obj")


def unsafe_pickles(path: Path, torchscript: bool = False) -> list[str]:
    """``member calls module.name`` for every callable outside the allowlist that a pickle inside
    ``path`` (a zip archive, possibly holding zip archives: torch.save files in a .pt2) would
    import, and ``member: unreadable pickle`` for a pickle that does not parse to its end."""
    problems: list[str] = []
    with zipfile.ZipFile(path) as zf:
        _scan_zip(zf, "", problems, torchscript)
    return problems


def _pickled_members(zf: zipfile.ZipFile) -> set[str]:
    """Members the archive's payload configs (``data/*/model_*_config.json``) mark as pickled."""
    import json
    import posixpath

    marked = set()
    for name in zf.namelist():
        if not name.endswith("_config.json") or "/data/" not in f"/{name}":
            continue
        try:
            config = json.loads(zf.read(name)).get("config", {})
        except (ValueError, AttributeError):
            raise BadInput(f"{name}: damaged payload configuration in the archive") from None
        for entry in config.values() if isinstance(config, dict) else ():
            file = str(entry.get("path_name", "")) if isinstance(entry, dict) else ""
            if entry.get("use_pickle") or file.startswith(_PT2_PICKLED_PREFIXES):
                marked.add(posixpath.join(posixpath.dirname(name), file))
    return marked


#: Archives inside archives are read into memory: at most this deep and this big.
_MAX_NESTING = 4
_MAX_NESTED_BYTES = 4 << 30


def _scan_zip(zf: zipfile.ZipFile, prefix: str, problems: list[str], torchscript: bool, depth: int = 0) -> None:
    if depth > _MAX_NESTING:
        problems.append(f"{prefix}: archives nested more than {_MAX_NESTING} deep")
        return
    pickled = _pickled_members(zf)
    for info in zf.infolist():
        if info.is_dir():
            continue
        name = info.filename
        with zf.open(info) as member:
            head = member.read(4)
        if head[:2] == b"PK":
            if info.file_size > _MAX_NESTED_BYTES:
                problems.append(f"{prefix}{name}: an archive inside the archive over {_MAX_NESTED_BYTES >> 30} GiB")
                continue
            try:
                with zipfile.ZipFile(io.BytesIO(zf.read(info))) as inner:
                    _scan_zip(inner, prefix + name + "!", problems, torchscript, depth + 1)
            except zipfile.BadZipFile:
                problems.append(f"{prefix}{name}: a damaged archive inside the archive")
        elif name.endswith(".pkl") or name in pickled or (name.endswith((".pt", ".pth")) and _is_pickle(head)):
            names, complete = pickle_globals(zf.read(info))
            problems += [f"{prefix}{name} calls {m}.{n}" for m, n in names if not _allowed(m, n, torchscript)]
            if not complete:
                problems.append(f"{prefix}{name}: a pickle that does not parse")


def refuse_unsafe_pickles(path: Path, what: str, trust_pickle: bool, torchscript: bool = False) -> None:
    """Raise BadInput naming the first callable a pickle in ``path`` would run, unless trusted."""
    if trust_pickle:
        return
    try:
        problems = unsafe_pickles(path, torchscript=torchscript)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, ValueError, NotImplementedError) as err:
        raise BadInput(f"{path}: not a readable {what} ({type(err).__name__}: {err})") from None
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        first = problems[0]
        found = f"holds a pickle that would run {first.replace(' calls ', ': ')}" if " calls " in first else \
            f"cannot be checked for code ({first})"
        raise BadInput(f"{path}: the {what} {found}{more} when loaded; edgeconv refuses to unpickle it. "
                       "Pass --trust-pickle only if you trust the file")
