"""Tensor access and value tests shared by the constraint kinds (converter/matrix/constraints.py).

A value test is the part of a constraint mapping that says which values pass
(``eq``/``in``/``not_in``/``min``/``max``, their per-element ``each_*`` forms, ``odd``, ``match``).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np

VALUE_TESTS = ("eq", "in", "not_in", "min", "max", "each_eq", "each_in", "each_min", "each_max", "odd",
               "match")


class ConstraintError(ValueError):
    """A malformed constraint mapping; the loader adds the YAML line."""


# ----------------------------------------------------------------------------- tensor access


def _tensor(node, where):
    if where == "output":
        return node.outputs[0] if node.outputs else None
    if isinstance(where, int) and where < len(node.inputs):
        t = node.inputs[where]
        return t if getattr(t, "name", "") or _const(t) is not None else None
    return None


def _const(tensor):
    if tensor is None:
        return None
    from ..ir.graph import constant_value

    return constant_value(tensor)


def _shape(tensor):
    shape = getattr(tensor, "shape", None)
    if shape is None:
        values = _const(tensor)
        return None if values is None else tuple(values.shape)
    return tuple(shape)


def _static_shape(tensor):
    shape = _shape(tensor)
    if shape is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _where_text(where) -> str:
    return "output" if where == "output" else f"input {where}"


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------- value tests


def _value_test(spec: dict, label: str) -> tuple[Callable[[Any], bool], str]:
    """Build ``passes(value)`` from the value-test keys of ``spec`` plus its text."""
    tests = [k for k in VALUE_TESTS if k in spec]
    if not tests:
        raise ConstraintError(f"needs one of {', '.join(VALUE_TESTS)}")
    checks: list[Callable[[Any], bool]] = []
    texts: list[str] = []
    for key in tests:
        want = spec[key]
        if key in ("in", "not_in", "each_in"):
            if not isinstance(want, list):
                raise ConstraintError(f"'{key}' must be a list")
        elif key in ("min", "max", "each_min", "each_max"):
            if isinstance(want, bool) or not isinstance(want, (int, float)):
                raise ConstraintError(f"'{key}' must be a number")
        elif key == "odd" and want is not True:
            raise ConstraintError("'odd' must be true")
        elif key == "match":
            want = _regex(want)
        if key == "eq":
            checks.append(lambda v, w=want: v == w)
            texts.append(f"{label} not set" if want is None else f"{label} == {want}")
        elif key == "in":
            checks.append(lambda v, w=want: v in w)
            texts.append(f"{label} in {want}")
        elif key == "not_in":
            checks.append(lambda v, w=want: v not in w)
            texts.append(f"{label} not in {want}")
        elif key == "min":
            checks.append(lambda v, w=want: v >= w)
            texts.append(f"{label} >= {want}")
        elif key == "max":
            checks.append(lambda v, w=want: v <= w)
            texts.append(f"{label} <= {want}")
        elif key == "each_eq":
            checks.append(lambda v, w=want: all(x == w for x in _as_list(v)))
            texts.append(f"every {label} == {want}")
        elif key == "each_in":
            checks.append(lambda v, w=want: all(x in w for x in _as_list(v)))
            texts.append(f"every {label} in {want}")
        elif key == "each_min":
            checks.append(lambda v, w=want: all(x >= w for x in _as_list(v)))
            texts.append(f"every {label} >= {want}")
        elif key == "each_max":
            checks.append(lambda v, w=want: all(x <= w for x in _as_list(v)))
            texts.append(f"every {label} <= {want}")
        elif key == "odd":
            checks.append(lambda v: isinstance(v, int) and not isinstance(v, bool) and v % 2 == 1)
            texts.append(f"{label} odd")
        elif key == "match":
            checks.append(lambda v, w=want: isinstance(v, str) and w.fullmatch(v) is not None)
            texts.append(f"{label} matching {want.pattern}")

    def passes(value) -> bool:
        try:
            return all(check(value) for check in checks)
        except TypeError:
            return False

    return passes, " and ".join(texts)


def _regex(text):
    import re

    if not isinstance(text, str):
        raise ConstraintError("'match' must be a regular expression (text)")
    try:
        return re.compile(text)
    except re.error as err:
        raise ConstraintError(f"'match' is not a valid regular expression: {err}") from None


def _as_list(value):
    """``value`` as a flat list: a scalar becomes [scalar]; nested lists (a constant tensor's
    ``tolist()``) are flattened, so ``each_*`` tests look at every element."""
    if not isinstance(value, (list, tuple)):
        return [value]
    flat = []
    for item in value:
        flat.extend(_as_list(item) if isinstance(item, (list, tuple)) else [item])
    return flat


def _where(value, key: str):
    if value == "output" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ConstraintError(f"'{key}' must be an input index or 'output', got {value!r}")
