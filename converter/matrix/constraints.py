"""Declarative constraints from ``op_support_matrix.yaml``, compiled to small predicate objects.

A constraint is data (a YAML mapping), never code: exactly one *kind* key says what is tested,
the remaining keys say which values pass.  ``compile_constraint`` validates the mapping once at
load time and returns a :class:`Constraint` whose ``failure(node, op, hw)`` is cheap enough to run
for every node of many models against 20+ framework x hardware pairs.

Kinds (``N`` is an input index, ``output`` the first output)::

    {attr: group, in: [1], default: 1}            attribute value tests: eq, in, not_in, min, max,
    {attr: dilations, each_eq: 1}                 and per-element each_eq, each_in, each_min, each_max;
    {attr: size, odd: true}                       odd (an odd integer); match (a regular expression
    {attr: equation, match: "^[a-z,.>-]*$"}       the whole text must match: data, never evaluated)
    {rank: 0, max: 4}                             rank of input N / output: eq, in, min, max
    {dtype: 0, in: [float32, float16]}            element type of input N / output
    {const_inputs: [1, 2]}                        these inputs must be known at export time
    {elements: 0, max: 16000}                     element count of input N / output
    {dims: 0, max: 16384}                         every dimension of input N / output;
    {dims: 0, axis: 0, eq: 1}                     with ``axis``: that one dimension only
    {value: 4, each_eq: 1}                        the constant values of input N (value tests;
                                                  each_* look at every element, nested or not)
    {value: 4, each_eq_dim: [0, 0]}               every value == dimension 0 of input 0
    {unused_outputs: [2]}                         these outputs are absent or read by no node
    {scales: 2, exact: true}                      Resize/Upsample scales (input N): exact: every
    {scales: 2, integer: true}                    scale x input dim == output dim (absent scales
                                                  pass: the sizes input sets the ratio); integer:
                                                  every output dim is a whole multiple of the
                                                  input dim (integer upscaling), from the shapes
    {broadcast: per_channel}                      same_shape | per_channel | same_rank | numpy
    {axes: attr:axis, rank_of: 0, in: [1]}        axis/axes (attr:NAME or input:N), normalized
                                                  to non-negative: in, subset_of, eq, last_only;
                                                  trailing_ones: every dim after the last axis is 1;
                                                  or_by_rank: {4: [1]} also passes axis 1 on rank 4
    {group: [1, depthwise]}                       Conv/ConvTranspose group: 1, depthwise
                                                  (group == C_in == C_out), multiplier (group ==
                                                  C_in, C_out = m·C_in), grouped (any other)
    {pattern: gelu_erf}                           the node sits inside a named subgraph pattern
                                                  (converter/matrix/patterns.py registry)
    {taps: inside}                                every Conv kernel tap reads some input element
                                                  (none reads only the padding)

Common modifiers: ``hw`` (list of hardware it applies to; default every hardware the entry
supports), ``why`` (the vendor's words), ``source`` (a citation of the upstream line,
``owner/repo@commit:path#Lline``, see citations.py), and
``severity: unverified`` for evidence that is not the vendor's own (a failure then makes the
verdict ``unverified`` rather than ``unsupported``), and ``when`` (a constraint mapping, or a list
of them, without ``when``): the constraint applies only to nodes that pass all of them, e.g.
``{attr: coordinate_transformation_mode, in: [asymmetric], when: {attr: mode, in: [nearest]}}``.
A ``when`` that cannot be decided (unknown shape, runtime value) applies the constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from .kinds_io import compile_scales, compile_taps, compile_unused_outputs
from .values import (VALUE_TESTS, ConstraintError, _as_list, _const, _plain, _shape, _static_shape,
                     _tensor, _value_test, _where, _where_text)

KINDS = ("attr", "rank", "dtype", "const_inputs", "elements", "dims", "value", "broadcast", "axes",
         "group", "pattern", "unused_outputs", "scales", "taps")
MODIFIERS = ("hw", "why", "source", "severity", "when")
BROADCAST_RULES = ("same_shape", "per_channel", "same_rank", "numpy")
AXES_TESTS = ("in", "subset_of", "eq", "last_only", "trailing_ones")
GROUP_KINDS = ("1", "depthwise", "multiplier", "grouped")

#: Marker for "this value is not known for this node" (unknown shape, runtime tensor, ...).
UNKNOWN = object()


@dataclass(frozen=True)
class Failure:
    #: e.g. "Softmax axis=1 on rank-5 input 0: gpu supports rank <= 4"
    reason: str
    #: the constraint as text, e.g. "rank(input 0) <= 4"
    constraint: str
    #: "unsupported", or "unverified" when the value is unknown or the evidence is unofficial
    status: str
    source: str | None


@dataclass(frozen=True)
class Constraint:
    kind: str
    text: str
    hw: tuple[str, ...] | None
    why: str | None
    source: str | None
    severity: str
    spec: dict
    _test: Callable[[Any, str], tuple[bool, str] | None]

    def failure(self, node, op: str, hw: str) -> Failure | None:
        """None when ``node`` passes, else a :class:`Failure` naming the failed values."""
        result = self._test(node, op)
        if result is None:
            return None
        known, actual = result
        if not known:
            return Failure(
                f"{op} {actual}: cannot check '{self.text}' for {hw}", self.text, "unverified",
                self.source,
            )
        why = f" ({self.why})" if self.why else ""
        return Failure(f"{op} {actual}: {hw} supports {self.text}{why}", self.text,
                       self.severity, self.source)


# ----------------------------------------------------------------------------- kinds


def _compile_attr(spec):
    name = spec["attr"]
    if not isinstance(name, str):
        raise ConstraintError("'attr' must be an attribute name")
    has_default = "default" in spec
    default = spec.get("default")
    passes, text = _value_test(spec, name)

    def test(node, op):
        if name in node.attrs:
            value = _plain(node.attrs[name])
        elif has_default:
            value = default
        else:
            return None if passes(None) else (True, f"{name} is not set")
        return None if passes(value) else (True, f"{name}={value}")

    return test, text


def _compile_shape_kind(spec, kind):
    where = _where(spec[kind], kind)
    label = {"rank": "rank", "elements": "elements", "dims": "dim"}[kind]
    axis = spec.get("axis") if kind == "dims" else None
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise ConstraintError("'axis' must be a dimension index")
    if kind == "dims" and axis is None:
        spec = {("each_" + k if k in ("max", "min", "eq", "in") else k): v for k, v in spec.items()}
    elif axis is not None:
        label = f"dim {axis}"
    passes, text = _value_test({k: v for k, v in spec.items() if k != "axis"}, label)
    text = f"{text} ({_where_text(where)})"

    def test(node, op):
        tensor = _tensor(node, where)
        if tensor is None:
            return None
        shape = _shape(tensor) if kind == "rank" else _static_shape(tensor)
        if shape is None:
            return (False, f"{_where_text(where)} with unknown shape")
        if kind == "rank":
            value, what = len(shape), f"on rank-{len(shape)} {_where_text(where)}"
        elif axis is not None:
            if not -len(shape) <= axis < len(shape):
                return (True, f"rank-{len(shape)} {_where_text(where)} has no dim {axis}")
            value, what = shape[axis], f"{_where_text(where)} of shape {list(shape)}"
        elif kind == "elements":
            value = int(np.prod(shape)) if shape else 1
            what = f"{_where_text(where)} of {value} elements {list(shape)}"
        else:
            value, what = list(shape), f"{_where_text(where)} of shape {list(shape)}"
        return None if passes(value) else (True, what)

    return test, text


def _compile_value(spec):
    where = _where(spec["value"], "value")
    label = f"value of {_where_text(where)}"
    dim_ref = spec.get("each_eq_dim")
    if dim_ref is not None and not (isinstance(dim_ref, list) and len(dim_ref) == 2
                                    and all(isinstance(v, int) and not isinstance(v, bool) for v in dim_ref)):
        raise ConstraintError("'each_eq_dim' must be [input index, axis]")
    plain = {k: v for k, v in spec.items() if k in VALUE_TESTS}
    passes, text = _value_test(plain, label) if plain or dim_ref is None else (lambda v: True, "")
    if dim_ref is not None:
        dim_text = f"every {label} == dim {dim_ref[1]} of input {dim_ref[0]}"
        text = f"{text} and {dim_text}" if text else dim_text

    def test(node, op):
        tensor = _tensor(node, where)
        if tensor is None:
            return None
        values = _const(tensor)
        if values is None:
            return (False, f"{_where_text(where)} computed at runtime")
        value = values.tolist()
        if not passes(value):
            return (True, f"{_where_text(where)}={value}")
        if dim_ref is not None:
            shape = _static_shape(_tensor(node, dim_ref[0]))
            if shape is None or not -len(shape) <= dim_ref[1] < len(shape):
                return (False, f"input {dim_ref[0]} of unknown shape")
            if np.any(np.asarray(values) != shape[dim_ref[1]]):
                return (True, f"{_where_text(where)}={value} with dim {dim_ref[1]} of input {dim_ref[0]} = "
                              f"{shape[dim_ref[1]]}")
        return None

    return test, text


def _compile_dtype(spec):
    where = _where(spec["dtype"], "dtype")
    allowed = spec.get("in")
    if not isinstance(allowed, list):
        raise ConstraintError("'dtype' needs 'in: [dtype, ...]'")
    text = f"{_where_text(where)} dtype in {allowed}"

    def test(node, op):
        from ..ir.graph import dtype_name

        tensor = _tensor(node, where)
        if tensor is None:
            return None
        name = dtype_name(tensor)
        if name is None:
            values = _const(tensor)
            name = None if values is None else values.dtype.name
        if name is None:
            return (False, f"{_where_text(where)} of unknown dtype")
        return None if name in allowed else (True, f"{_where_text(where)} dtype={name}")

    return test, text


def _compile_const_inputs(spec):
    indices = spec["const_inputs"]
    if not isinstance(indices, list) or not all(isinstance(i, int) for i in indices):
        raise ConstraintError("'const_inputs' must be a list of input indices")
    text = f"constant input(s) {indices}"

    def test(node, op):
        runtime = [i for i in indices if _tensor(node, i) is not None and _const(_tensor(node, i)) is None]
        return None if not runtime else (True, f"input(s) {runtime} computed at runtime")

    return test, text


def _compile_broadcast(spec):
    rule = spec["broadcast"]
    if rule not in BROADCAST_RULES:
        raise ConstraintError(f"'broadcast' must be one of {', '.join(BROADCAST_RULES)}")
    text = f"broadcast {rule}"

    def test(node, op):
        shapes = []
        for tensor in node.inputs:
            shape = _shape(tensor)
            if shape is None:
                return (False, "operand of unknown shape")
            shapes.append(tuple(shape))
        if len(shapes) < 2 or all(s == shapes[0] for s in shapes) or rule == "numpy":
            return None
        if rule == "same_rank" and len({len(s) for s in shapes}) == 1:
            return None
        if rule == "per_channel" and _per_channel_ok(shapes):
            return None
        return (True, f"broadcast {' x '.join(str(list(s)) for s in shapes)}")

    return test, text


def _per_channel_ok(shapes) -> bool:
    """[B,C,H,W] op [B,C,1,1] / [B,1,H,W] / [B,1,1,1] / scalar (TFLite Core ML delegate's list)."""
    full = max(shapes, key=len)
    for shape in shapes:
        if shape == full or int(np.prod(shape or (1,))) == 1:
            continue
        if len(shape) != len(full) or len(full) != 4:
            return False
        same = [a == b for a, b in zip(shape, full)]
        ones = [a == 1 for a in shape]
        if not (same[0] and ((same[1] and ones[2] and ones[3]) or (ones[1] and same[2] and same[3]))):
            return False
    return True


def _compile_axes(spec):
    source = spec["axes"]
    if not (isinstance(source, str) and source.split(":")[0] in ("attr", "input")):
        raise ConstraintError("'axes' must be 'attr:NAME' or 'input:N'")
    kind, _, ref = source.partition(":")
    rank_of = _where(spec.get("rank_of", 0), "rank_of")
    tests = [k for k in AXES_TESTS if k in spec]
    if not tests:
        raise ConstraintError(f"'axes' needs one of {', '.join(AXES_TESTS)}")
    has_default = "default" in spec
    default = spec.get("default")
    parts = []
    if "in" in spec:
        parts.append(f"axis in {spec['in']}")
    if "subset_of" in spec:
        parts.append(f"axes within {spec['subset_of']}")
    if "eq" in spec:
        parts.append(f"axes == {spec['eq']}")
    if spec.get("last_only"):
        parts.append("the last axis only")
    if spec.get("trailing_ones"):
        parts.append("every dim after the axis == 1")
    or_by_rank = spec.get("or_by_rank") or {}
    if not isinstance(or_by_rank, dict):
        raise ConstraintError("'or_by_rank' must map a rank to allowed axes")
    text = " and ".join(parts) + "".join(
        f", or axes {sorted(v)} on rank {k}" for k, v in sorted(or_by_rank.items()))

    def test(node, op):
        if kind == "attr":
            raw = _plain(node.attrs[ref]) if ref in node.attrs else default if has_default else None
        else:
            tensor = _tensor(node, int(ref))
            if tensor is None:
                raw = default if has_default else None
            else:
                values = _const(tensor)
                if values is None:
                    return (False, "axes computed at runtime")
                raw = values.tolist()
        tensor = _tensor(node, rank_of)
        shape = None if tensor is None else _shape(tensor)
        if shape is None:
            return (False, "input of unknown rank")
        rank = len(shape)
        axes = list(range(rank)) if raw is None else _as_list(raw)
        axes = sorted(int(a) + rank if int(a) < 0 else int(a) for a in axes)
        shown = axes[0] if (kind == "attr" and not isinstance(raw, list) and raw is not None) else axes
        what = f"{ref if kind == 'attr' else 'axes'}={shown} on rank-{rank} input"
        if rank in or_by_rank and set(axes) <= set(or_by_rank[rank]):
            return None
        if "in" in spec and not all(a in spec["in"] for a in axes):
            return (True, what)
        if "subset_of" in spec and not set(axes) <= set(spec["subset_of"]):
            return (True, what)
        if "eq" in spec and axes != sorted(spec["eq"]):
            return (True, what)
        if spec.get("last_only") and axes != [rank - 1]:
            return (True, what)
        if spec.get("trailing_ones"):
            static = _static_shape(tensor)
            if static is None:
                return (False, "input of unknown shape")
            if any(d != 1 for d in static[axes[-1] + 1:]):
                return (True, f"{what} of shape {list(static)}")
        return None

    return test, text


def _compile_group(spec):
    allowed = [str(a) for a in _as_list(spec["group"])]
    bad = [a for a in allowed if a not in GROUP_KINDS]
    if bad:
        raise ConstraintError(f"'group' values must be among {', '.join(GROUP_KINDS)}, got {bad}")
    text = "group in " + "/".join(allowed)

    def test(node, op):
        group = int(_plain(node.attrs.get("group", 1)))
        if group == 1:
            kind = "1"
        else:
            x_shape = _shape(node.inputs[0]) if node.inputs else None
            w_shape = _shape(node.inputs[1]) if len(node.inputs) > 1 else None
            if x_shape is None or w_shape is None or len(x_shape) < 2:
                return (False, f"group={group} with unknown channel counts")
            c_in = x_shape[1]
            # Conv weight is [C_out, C_in/group, ...]; ConvTranspose weight is [C_in, C_out/group, ...].
            c_out = w_shape[0] if op == "Conv" else w_shape[1] * group
            kind = ("depthwise" if group == c_in == c_out else
                    "multiplier" if group == c_in and c_out % c_in == 0 else "grouped")
        if kind in allowed:
            return None
        return (True, f"group={group} ({'depthwise' if kind == 'depthwise' else kind + ' conv' if kind != '1' else 'plain'})")

    return test, text


def _compile_pattern(spec):
    from .patterns import PATTERNS

    name = spec["pattern"]
    known = PATTERNS.get(name) if isinstance(name, str) else None
    if known is None:
        raise ConstraintError(f"unknown pattern {name!r}; known: {', '.join(sorted(PATTERNS))}")
    text = f"only inside {known.title}"

    def test(node, op):
        if op in known.anchors and known.match(node):
            return None
        return (True, f"outside {known.title}")

    return test, text


_COMPILERS = {
    "attr": _compile_attr,
    "rank": lambda s: _compile_shape_kind(s, "rank"),
    "elements": lambda s: _compile_shape_kind(s, "elements"),
    "dims": lambda s: _compile_shape_kind(s, "dims"),
    "dtype": _compile_dtype,
    "value": _compile_value,
    "const_inputs": _compile_const_inputs,
    "broadcast": _compile_broadcast,
    "axes": _compile_axes,
    "group": _compile_group,
    "pattern": _compile_pattern,
    "unused_outputs": compile_unused_outputs,
    "scales": compile_scales,
    "taps": compile_taps,
}

_ALLOWED_KEYS = {
    "attr": set(VALUE_TESTS) | {"default"},
    "rank": set(VALUE_TESTS),
    "elements": {"max", "min"},
    "dims": {"max", "min", "eq", "in", "axis"},
    "dtype": {"in"},
    "value": set(VALUE_TESTS) | {"each_eq_dim"},
    "const_inputs": set(),
    "broadcast": set(),
    "axes": set(AXES_TESTS) | {"rank_of", "default", "or_by_rank"},
    "group": set(),
    "pattern": set(),
    "unused_outputs": set(),
    "scales": {"exact", "integer"},
    "taps": set(),
}


def compile_constraint(spec: Any, default_source: str | None) -> Constraint:
    if not isinstance(spec, dict):
        raise ConstraintError("a constraint must be a mapping")
    kinds = [k for k in KINDS if k in spec]
    if len(kinds) != 1:
        raise ConstraintError(f"a constraint needs exactly one of {', '.join(KINDS)}")
    kind = kinds[0]
    unknown = set(spec) - {kind} - set(MODIFIERS) - _ALLOWED_KEYS[kind]
    if unknown:
        raise ConstraintError(f"unknown key(s) {sorted(unknown)} for a '{kind}' constraint")
    severity = spec.get("severity", "unsupported")
    if severity not in ("unsupported", "unverified"):
        raise ConstraintError("'severity' must be 'unsupported' or 'unverified'")
    hw = spec.get("hw")
    if hw is not None and not (isinstance(hw, list) and all(isinstance(h, str) for h in hw)):
        raise ConstraintError("'hw' must be a list of hardware names")
    test, text = _COMPILERS[kind](spec)
    if "when" in spec:
        test, text = _with_when(spec["when"], test, text, default_source)
    return Constraint(
        kind=kind, text=text, hw=tuple(hw) if hw else None, why=spec.get("why"),
        source=spec.get("source", default_source), severity=severity,
        spec={k: v for k, v in spec.items() if k not in ("hw",)}, _test=test,
    )


def _with_when(when, test, text, default_source):
    """Wrap ``test`` so it runs only on nodes that pass every ``when`` condition."""
    conditions = when if isinstance(when, list) else [when]
    compiled = []
    for cond in conditions:
        if not isinstance(cond, dict) or "when" in cond or set(cond) & {"hw", "severity"}:
            raise ConstraintError("'when' must be a constraint mapping (or a list of them) "
                                  "without its own when/hw/severity")
        compiled.append(compile_constraint(cond, default_source))

    def guarded(node, op):
        for cond in compiled:
            result = cond._test(node, op)
            if result is not None and result[0]:
                return None  # the condition is known not to hold: the constraint does not apply
        return test(node, op)

    return guarded, f"{text} when {' and '.join(c.text for c in compiled)}"
