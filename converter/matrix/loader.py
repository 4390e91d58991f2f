"""Read ``op_support_matrix.yaml`` (plus overlays) keeping the line of every value.

Validation errors must point at the YAML line the user has to fix, so the file is read with
``yaml.compose`` (which keeps node marks) and turned into plain dicts/lists alongside a map from
each value's path (``("frameworks", "tnn", "ops", "Conv", "supported")``) to ``(file, line)``.
Overlays are merged into the base: mappings merge key by key, anything else replaces, so an
overlay can add one hardware or override one op entry without copying the whole file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BadInput

Path_ = tuple  # a path of keys/indices into the document
Lines = dict  # Path_ -> (file name, 1-based line)


class MatrixFileError(BadInput):
    """A malformed matrix file; the message starts with ``file:line:``."""


def read_yaml_with_lines(path: Path) -> tuple[Any, Lines]:
    import yaml

    if path.is_dir():
        raise MatrixFileError(f"{path}: is a directory, not a YAML file")
    from ..infra.fsutil import regular_file

    regular_file(path, "YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise MatrixFileError(f"cannot read matrix file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise MatrixFileError(f"{path}: not a YAML file (not UTF-8 text)") from None
    try:
        # libyaml's parser, when PyYAML was built with it, composes the same nodes and marks
        # ~15x faster than the pure-Python one (0.17 s of every port for the packaged matrix).
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path.name}:{mark.line + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise MatrixFileError(f"{where}: invalid YAML: {problem}") from None
    if root is None:
        raise MatrixFileError(f"{path.name}:1: the matrix file is empty")
    lines: Lines = {}
    constructor = yaml.constructor.SafeConstructor()
    budget = _Budget(path.name, max(MAX_YAML_NODES, 4 * text.count("\n")))
    data = _build(root, (), path.name, lines, constructor, budget)
    return data, lines


#: Aliases (``*name``) are expanded where they are used, so that each value keeps its own line:
#: nested aliases could multiply a few lines into billions of values (an "alias bomb").  A file
#: may expand to at most this many YAML nodes (or 4 per line of text, if more) and nest at most
#: MAX_YAML_DEPTH levels; past that it is refused with the line where it happened.
MAX_YAML_NODES = 200_000
MAX_YAML_DEPTH = 64


class _Budget:
    def __init__(self, fname: str, nodes: int):
        self.fname, self.left = fname, nodes
        self.limit = nodes

    def spend(self, node, depth: int) -> None:
        self.left -= 1
        where = f"{self.fname}:{node.start_mark.line + 1}"
        if self.left < 0:
            raise MatrixFileError(f"{where}: the YAML expands to more than {self.limit:,} values (aliases "
                                  "nested in aliases?); edgeconv refuses such files")
        if depth > MAX_YAML_DEPTH:
            raise MatrixFileError(f"{where}: the YAML nests deeper than {MAX_YAML_DEPTH} levels (a recursive "
                                  "alias?); edgeconv refuses such files")


def _build(node, at: tuple, fname: str, lines: Lines, constructor, budget: _Budget | None = None) -> Any:
    import yaml

    budget = budget or _Budget(fname, MAX_YAML_NODES)
    budget.spend(node, len(at))
    lines[at] = (fname, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # a list or mapping as a key ("? [a, b]")
                raise MatrixFileError(f"{fname}:{key_node.start_mark.line + 1}: a key in {_dotted(at)} is a "
                                      "list or mapping; keys are names or numbers")
            key = constructor.construct_object(key_node, deep=True)
            if key in out:
                raise MatrixFileError(
                    f"{fname}:{key_node.start_mark.line + 1}: duplicate key '{key}' in {_dotted(at)}"
                )
            out[key] = _build(value_node, at + (key,), fname, lines, constructor, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, at + (i,), fname, lines, constructor, budget) for i, v in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)


def merge_overlay(base: Any, base_lines: Lines, overlay: Any, overlay_lines: Lines,
                  at: tuple = ()) -> Any:
    """Merge ``overlay`` into ``base`` (mappings key by key, everything else replaced)."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            if key in base:
                merged[key] = merge_overlay(base[key], base_lines, value, overlay_lines, at + (key,))
            else:
                merged[key] = value
                _copy_lines(overlay_lines, base_lines, at + (key,))
        return merged
    _drop_lines(base_lines, at)
    _copy_lines(overlay_lines, base_lines, at)
    return overlay


def _copy_lines(src: Lines, dst: Lines, prefix: tuple) -> None:
    n = len(prefix)
    for key, where in src.items():
        if key[:n] == prefix:
            dst[key] = where


def _drop_lines(lines: Lines, prefix: tuple) -> None:
    n = len(prefix)
    for key in [k for k in lines if k[:n] == prefix and len(k) > n]:
        del lines[key]


def _dotted(at: tuple) -> str:
    return ".".join(str(p) for p in at) or "the top level"


def line_of(lines: Lines, at: tuple) -> str:
    """``file:line`` of the value at ``at`` (or of its nearest ancestor that has one)."""
    while at not in lines and at:
        at = at[:-1]
    fname, line = lines.get(at, ("op_support_matrix.yaml", 1))
    return f"{fname}:{line}"


def fail(lines: Lines, at: tuple, message: str) -> None:
    raise MatrixFileError(f"{line_of(lines, at)}: {_dotted(at)}: {message}")
