"""The shape of ``op_support_matrix.yaml``, checked with line numbers.

```yaml
version: 1
upstreams: {<owner>/<repo>: <full commit>} # the snapshots citations point into
frameworks:
  <framework>:
    title: str
    source: <citation>                     # required: where this data comes from (citations.py:
                                           # owner/repo@commit:path#Lline, commit pinned above)
    aliases: [str]                         # other words for the framework (--to)
    defaults: {supported: all|[hw], unverified: all|[hw]}   # for entries that give neither
    hardware:
      <hw>:
        title: str
        source: <citation>                 # required
        rank_source: <citation>            # where properties.max_rank comes from (default: source)
        aliases: [str]                     # words users type (--hw npu); shared = ambiguous
        like: <hw>                         # a new chip that behaves like an existing column
        properties: {max_outputs: int|null, dtypes: [str], max_rank: int|null,
                     dynamic_shapes: bool|str, ...}
    ops:
      <OnnxOpType>:
        target: str                        # the framework's layer/op name
        source: <citation>                 # where it differs from the framework's source
        supported: all|[hw]                # hardware with an implementation
        unverified: all|[hw]               # vendor silent; everything else is unsupported
        sources: {<hw>: <citation>}        # per-hardware source where it differs
        notes: {<hw>: str}                 # the reason shown for that hardware
        rank_exempt: bool                  # (rarely) skip the hardware's max_rank
        may_stay_on_cpu: {<hw>: {why: str, source: <citation>}}
                                           # supported, but the vendor's compiler may leave it
                                           # (and what follows it) on the CPU
        constraints: [<constraint>]        # see converter/matrix/constraints.py
```
"""

from __future__ import annotations

from .citations import CitationError, resolve_citation, valid_full_commit
from .constraints import ConstraintError, compile_constraint
from .loader import Lines, fail

_FW_KEYS = {"title", "source", "aliases", "defaults", "hardware", "ops", "notes"}
_HW_KEYS = {"title", "source", "rank_source", "aliases", "like", "properties", "notes", "fallback"}
_OP_KEYS = {"target", "source", "supported", "unverified", "sources", "notes", "constraints",
            "rank_exempt", "may_stay_on_cpu"}
_PROPERTY_TYPES = {
    "max_outputs": (int, type(None)),
    "max_rank": (int, type(None)),
    "dtypes": (list,),
    "dynamic_shapes": (bool, str),
    "max_inputs": (int, type(None)),
    "notes": (str,),
}


def validate(data, lines: Lines) -> None:
    if not isinstance(data, dict):
        fail(lines, (), "the matrix must be a mapping")
    unknown = set(data) - {"version", "upstreams", "frameworks", "notes"}
    if unknown:
        fail(lines, (sorted(unknown)[0],), "unknown top-level key")
    if data.get("version") != 1:
        fail(lines, ("version",), "version must be 1")
    upstreams = data.get("upstreams")
    if not isinstance(upstreams, dict) or not upstreams:
        fail(lines, ("upstreams",), "must map each cited repository (owner/repo) to its full commit")
    for repo, commit in upstreams.items():
        if not valid_full_commit(commit):
            fail(lines, ("upstreams", repo), "must be a full 40-hex-digit commit")
    frameworks = data.get("frameworks")
    if not isinstance(frameworks, dict) or not frameworks:
        fail(lines, ("frameworks",), "must be a non-empty mapping of frameworks")
    for fw_name, fw in frameworks.items():
        _validate_framework(fw_name, fw, lines)
    for at, text in iter_citations(data):
        try:
            resolve_citation(text, upstreams)
        except CitationError as err:
            fail(lines, at, str(err))


def iter_citations(data):
    """``(path, citation text)`` of every ``source`` / ``rank_source`` / ``sources`` value."""
    for fw_name, fw in (data.get("frameworks") or {}).items():
        at = ("frameworks", fw_name)
        if not isinstance(fw, dict):
            continue
        if "source" in fw:
            yield at + ("source",), fw["source"]
        for hw_name, hw in (fw.get("hardware") or {}).items():
            for key in ("source", "rank_source"):
                if isinstance(hw, dict) and key in hw:
                    yield at + ("hardware", hw_name, key), hw[key]
            fallback = hw.get("fallback") if isinstance(hw, dict) else None
            if isinstance(fallback, dict) and "source" in fallback:
                yield at + ("hardware", hw_name, "fallback", "source"), fallback["source"]
        for op, entry in (fw.get("ops") or {}).items():
            if not isinstance(entry, dict):
                continue
            oat = at + ("ops", op)
            if "source" in entry:
                yield oat + ("source",), entry["source"]
            for hw_name, text in (entry.get("sources") or {}).items():
                yield oat + ("sources", hw_name), text
            for hw_name, spec in (entry.get("may_stay_on_cpu") or {}).items():
                if isinstance(spec, dict) and "source" in spec:
                    yield oat + ("may_stay_on_cpu", hw_name, "source"), spec["source"]
            for i, spec in enumerate(entry.get("constraints") or ()):
                yield from _constraint_citations(spec, oat + ("constraints", i))


def _constraint_citations(spec, at: tuple):
    if isinstance(spec, list):
        for i, item in enumerate(spec):
            yield from _constraint_citations(item, at + (i,))
    elif isinstance(spec, dict):
        if "source" in spec:
            yield at + ("source",), spec["source"]
        if "when" in spec:
            yield from _constraint_citations(spec["when"], at + ("when",))


def _validate_fallback(spec, hw_name: str, hw_names: set, at: tuple, lines: Lines) -> None:
    """``fallback: {to: <hw>, source: <citation>}`` (the runtime runs what this unit cannot on
    ``to``) or ``{to: null, reason: "..."}`` (it does not, and why)."""
    if spec is None:
        return
    if not isinstance(spec, dict) or set(spec) - {"to", "source", "reason"}:
        fail(lines, at, "must be {to: <hardware>, source: <citation>} or {to: null, reason: <text>}")
    to = spec.get("to")
    if to is None:
        if not isinstance(spec.get("reason"), str):
            fail(lines, at, "a fallback to nothing needs a 'reason'")
    elif to not in hw_names or to == hw_name:
        fail(lines, at + ("to",), f"'{to}' is not another hardware of this framework")
    elif not isinstance(spec.get("source"), str):
        fail(lines, at, "a fallback needs a 'source' (a citation)")


def _str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _validate_framework(name: str, fw, lines: Lines) -> None:
    at = ("frameworks", name)
    if not isinstance(fw, dict):
        fail(lines, at, "must be a mapping")
    _no_unknown(fw, _FW_KEYS, at, lines)
    if not isinstance(fw.get("source"), str):
        fail(lines, at, "every framework needs a 'source' (a citation owner/repo@commit:path#Lline)")
    hardware = fw.get("hardware")
    if not isinstance(hardware, dict) or not hardware:
        fail(lines, at + ("hardware",), "must be a non-empty mapping")
    for hw_name, hw in hardware.items():
        hat = at + ("hardware", hw_name)
        if not isinstance(hw, dict):
            fail(lines, hat, "must be a mapping")
        _no_unknown(hw, _HW_KEYS, hat, lines)
        if not isinstance(hw.get("source"), str):
            fail(lines, hat, "every hardware needs a 'source'")
        if "aliases" in hw and not _str_list(hw["aliases"]):
            fail(lines, hat + ("aliases",), "must be a list of words")
        if "like" in hw and hw["like"] not in hardware:
            fail(lines, hat + ("like",), f"unknown hardware '{hw['like']}'")
        props = hw.get("properties")
        if not isinstance(props, dict):
            fail(lines, hat + ("properties",), "needs properties (max_outputs at least)")
        if "max_outputs" not in props:
            fail(lines, hat + ("properties",), "needs 'max_outputs' (null = unlimited)")
        for key, value in props.items():
            kinds = _PROPERTY_TYPES.get(key)
            if kinds is None:
                fail(lines, hat + ("properties", key), f"unknown property; known: {', '.join(_PROPERTY_TYPES)}")
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                fail(lines, hat + ("properties", key), f"wrong type {type(value).__name__}")
    hw_names = set(hardware)
    for hw_name, hw in hardware.items():
        _validate_fallback(hw.get("fallback"), hw_name, hw_names, at + ("hardware", hw_name, "fallback"), lines)
    defaults = fw.get("defaults", {})
    for key in ("supported", "unverified"):
        if key in defaults:
            _hw_list(defaults[key], hw_names, at + ("defaults", key), lines)
    ops = fw.get("ops")
    if not isinstance(ops, dict) or not ops:
        fail(lines, at + ("ops",), "must be a non-empty mapping of ONNX op types")
    for op, entry in ops.items():
        _validate_op(op, entry, hw_names, at + ("ops", op), lines, fw.get("source"))


def _validate_op(op: str, entry, hw_names: set, at: tuple, lines: Lines, fw_source) -> None:
    if not isinstance(op, str) or not op[:1].isupper():
        fail(lines, at, "op names are ONNX op types (e.g. Conv)")
    if not isinstance(entry, dict):
        fail(lines, at, "must be a mapping")
    _no_unknown(entry, _OP_KEYS, at, lines)
    if "target" in entry and not isinstance(entry["target"], (str, type(None))):
        fail(lines, at + ("target",), "must be a string")
    for key in ("supported", "unverified"):
        if key in entry:
            _hw_list(entry[key], hw_names, at + (key,), lines)
    both = entry.get("supported"), entry.get("unverified")
    if isinstance(both[0], list) and isinstance(both[1], list):
        overlap = set(both[0]) & set(both[1])
        if overlap:
            fail(lines, at + ("unverified",), f"{sorted(overlap)} also listed as supported")
    for key in ("sources", "notes"):
        if key in entry:
            value = entry[key]
            if not isinstance(value, dict):
                fail(lines, at + (key,), "must map hardware to text")
            for hw in value:
                if hw not in hw_names:
                    fail(lines, at + (key, hw), f"unknown hardware '{hw}'")
    for hw, spec in (entry.get("may_stay_on_cpu") or {}).items():
        if hw not in hw_names:
            fail(lines, at + ("may_stay_on_cpu", hw), f"unknown hardware '{hw}'")
        if not isinstance(spec, dict) or set(spec) != {"why", "source"}:
            fail(lines, at + ("may_stay_on_cpu", hw), "must be {why: <the vendor's words>, source: <citation>}")
    constraints = entry.get("constraints", [])
    if not isinstance(constraints, list):
        fail(lines, at + ("constraints",), "must be a list")
    for i, spec in enumerate(constraints):
        try:
            compile_constraint(spec, fw_source)
        except ConstraintError as err:
            fail(lines, at + ("constraints", i), str(err))
        for hw in spec.get("hw") or ():
            if hw not in hw_names:
                fail(lines, at + ("constraints", i, "hw"), f"unknown hardware '{hw}'")


def _hw_list(value, hw_names: set, at: tuple, lines: Lines) -> None:
    if value == "all":
        return
    if not _str_list(value):
        fail(lines, at, "must be 'all' or a list of hardware names")
    for i, hw in enumerate(value):
        if hw not in hw_names:
            fail(lines, at + (i,), f"unknown hardware '{hw}'; known: {', '.join(sorted(hw_names))}")


def _no_unknown(mapping: dict, allowed: set, at: tuple, lines: Lines) -> None:
    for key in mapping:
        if key not in allowed:
            fail(lines, at + (key,), f"unknown key; allowed: {', '.join(sorted(allowed))}")
