"""The op support matrix: which ONNX op runs on which framework x hardware, and under what limits.

``load_matrix()`` reads ``op_support_matrix.yaml`` (shipped in the package, see
:data:`DEFAULT_MATRIX`; the repo root links to it) plus optional overlays, validates
it (a mistake is reported as ``file:line: path: problem``) and precompiles one lookup table per
framework x hardware so that :meth:`Matrix.check_node` is a dict lookup plus a few predicates.

Entry statuses: ``supported`` (the vendor documents an implementation), ``unverified`` (the vendor
is silent, e.g. the Neural Engine), ``unsupported`` (no implementation there).  An op type that is
not in the matrix at all is ``unsupported: no mapping``.  Every ``source`` is a citation of the
upstream line the fact comes from (:mod:`.citations`); :meth:`Matrix.citation` resolves it to the
pinned commit and its GitHub link.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Mapping

from ..errors import BadInput
from .citations import Citation, resolve_citation
from .constraints import Constraint, ConstraintError, Failure, compile_constraint
from .loader import Lines, MatrixFileError, fail, merge_overlay, read_yaml_with_lines
from .packaged import packaged_matrix_path

__all__ = [
    "DEFAULT_MATRIX", "Citation", "Matrix", "MatrixFileError", "NodeVerdict", "OpRule", "STATUSES",
    "load_matrix",
]

#: The matrix shipped inside the package (``converter/data/op_support_matrix.yaml``).
DEFAULT_MATRIX = packaged_matrix_path()
STATUSES = ("supported", "unverified", "unsupported")
PROPERTY_KEYS = ("max_outputs", "dtypes", "max_rank", "dynamic_shapes")


@dataclass(frozen=True)
class Fallback:
    """Where a runtime runs the nodes a unit cannot: ``to`` (a hardware of the same framework)
    or None, with the citation that says so, or the reason it does not."""

    to: str | None
    reason: str
    source: str | None = None


@dataclass(frozen=True)
class NodeVerdict:
    """One node against one framework x hardware.

    ``reason`` is the line a user reads ("ConvTranspose: rknpu has no Deconvolution");
    ``constraint`` the failed rule as text; ``remedy`` is filled in by the planner
    (rewrite / postprocess / custom / retrain).
    """

    node: str
    op: str
    status: str
    reason: str
    constraint: str | None = None
    source: str | None = None
    remedy: str | None = None
    framework: str = ""
    hw: str = ""
    target: str | None = None
    citation: Citation | None = None  # ``source`` resolved: full commit and link

    @property
    def supported(self) -> bool:
        return self.status != "unsupported"

    def to_dict(self) -> dict:
        return {
            "node": self.node, "op": self.op, "status": self.status, "reason": self.reason,
            "constraint": self.constraint, "source": self.source, "remedy": self.remedy,
            "target": self.target, "citation": self.citation.to_dict() if self.citation else None,
        }


@dataclass(frozen=True)
class OpRule:
    """An op's entry for one framework x hardware, with its constraints compiled."""

    op: str
    status: str
    target: str | None
    source: str | None
    note: str | None
    constraints: tuple[Constraint, ...]


class Matrix:
    def __init__(self, data: dict, lines: Lines, files: list[Path], *, validated: bool = False):
        """``validated``: ``data`` is a document that passed :func:`.schema.validate` before
        (the packaged matrix's parse cache, :mod:`.compiled`), so only its tables are built."""
        self.data = data
        self.files = files
        self._lines = lines
        self._rules: dict[tuple[str, str], dict[str, OpRule]] = {}
        self._citations: dict[str, Citation] = {}
        self._validate_and_compile(validated)

    # ------------------------------------------------------------------ public API

    @property
    def frameworks(self) -> list[str]:
        return list(self.data["frameworks"])

    def hardware(self, framework: str) -> list[str]:
        return list(self._fw(framework)["hardware"])

    def resolve_framework(self, word: str) -> str:
        key = word.strip().lower()
        for name, fw in self.data["frameworks"].items():
            if key == name or key in [a.lower() for a in fw.get("aliases", [])]:
                return name
        raise BadInput(f"unknown framework '{word}'; choose one of: {', '.join(self.frameworks)}, all")

    def resolve_hw_words(self, framework: str, word: str) -> list[str]:
        """Every hardware of ``framework`` that what the user typed names, in matrix order.

        An exact hardware name or an alias names one; a class word names each hardware that lists
        it as an alias (TNN's ``npu``: huawei_npu, rknpu, apple_npu; TNN's ``gpu``: opencl, metal,
        cuda), because a user who types ``npu`` means "the NPU" of whichever device they ship to.
        """
        fw = self._fw(framework)
        key = word.strip().lower()
        if key in fw["hardware"]:
            return [key]
        matches = [hw for hw, spec in fw["hardware"].items()
                   if key in [a.lower() for a in spec.get("aliases", [])]]
        if matches:
            return matches
        raise BadInput(f"unknown hardware '{word}' for {framework}; choose one of: "
                       f"{', '.join(fw['hardware'])}")

    def resolve_hw(self, framework: str, word: str) -> str:
        """The one hardware a single-target call means (the Python API, ``split``).

        A class word naming several hardware raises BadInput listing them; the commands that
        port, check or plan expand it instead (:meth:`resolve_targets`).
        """
        matches = self.resolve_hw_words(framework, word)
        if len(matches) > 1:
            raise BadInput(f"'{word}' names several {framework} hardware ({', '.join(matches)}); "
                           f"this needs one of them")
        return matches[0]

    def resolve_targets(self, to: str, hw: str) -> list[tuple[str, str]]:
        """(framework, hardware) pairs for ``--to`` / ``--hw`` words, each may be ``all``; a class
        word expands to every hardware it names.  With ``--to all``, a framework that has no such
        hardware is left out (an error only when none has it)."""
        every = to.strip().lower() == "all"
        frameworks = self.frameworks if every else [self.resolve_framework(to)]
        pairs = []
        for fw in frameworks:
            if hw.strip().lower() == "all":
                pairs.extend((fw, h) for h in self.hardware(fw))
                continue
            try:
                pairs.extend((fw, h) for h in self.resolve_hw_words(fw, hw))
            except BadInput:
                if not every:
                    raise
        if not pairs:
            raise BadInput(f"no framework has hardware '{hw}'")
        return pairs

    def properties(self, framework: str, hw: str) -> dict:
        spec = self._hw(framework, hw)
        props = dict(spec.get("properties", {}))
        for key in PROPERTY_KEYS:
            props.setdefault(key, None)
        return props

    def fallback(self, framework: str, hw: str) -> Fallback:
        """The unit ``hw``'s runtime falls back to for nodes it cannot run (matrix ``fallback:``)."""
        spec = self._hw(framework, hw).get("fallback")
        if spec is None:
            return Fallback(None, f"no fallback unit is documented for {framework} {hw}")
        if spec.get("to") is None:
            return Fallback(None, spec["reason"])
        return Fallback(spec["to"], f"the {framework} runtime runs what {hw} cannot on {spec['to']}", spec["source"])

    def may_stay_on_cpu(self, framework: str, onnx_op: str, hw: str) -> dict | None:
        """``{why, source}`` when ``hw``'s compiler may leave a supported ``onnx_op`` on the CPU
        (the matrix's ``may_stay_on_cpu``), else None."""
        entry = self._fw(framework)["ops"].get(onnx_op) or {}
        return (entry.get("may_stay_on_cpu") or {}).get(hw)

    def target_op(self, framework: str, onnx_op: str) -> str | None:
        entry = self._fw(framework)["ops"].get(onnx_op)
        return None if entry is None else entry.get("target")

    def op_rule(self, framework: str, hw: str, op_type: str) -> OpRule | None:
        return self._table(framework, hw).get(op_type)

    def op_status(self, framework: str, hw: str, op_type: str) -> str:
        rule = self._table(framework, hw).get(op_type)
        return "unsupported" if rule is None else rule.status

    def supports_op(self, framework: str, hw: str, op_type: str) -> bool:
        return self.op_status(framework, hw, op_type) != "unsupported"

    def ops(self, framework: str | None = None) -> list[str]:
        """ONNX op types with an entry (for one framework, or for any)."""
        names: set[str] = set()
        for fw in [framework] if framework else self.frameworks:
            names.update(self._fw(fw)["ops"])
        return sorted(names)

    @property
    def upstreams(self) -> dict[str, str]:
        """Pinned upstream repositories: ``owner/repo`` -> full commit."""
        return dict(self.data["upstreams"])

    def citation(self, source: str | None) -> Citation | None:
        """A ``source:`` resolved to its pinned commit (``.url`` links the cited lines)."""
        if not source:
            return None
        found = self._citations.get(source)
        if found is None:
            found = self._citations[source] = resolve_citation(source, self.data["upstreams"])
        return found

    def check_node(self, node, framework: str, hw: str) -> NodeVerdict:
        op = node.op
        name = node.name or (node.outputs[0].name if node.outputs else op)
        table = self._table(framework, hw)
        rule = table.get(op) if not getattr(node, "domain", "") or node.domain == "ai.onnx" else None
        if rule is None:
            domain = getattr(node, "domain", "")
            shown = f"{domain}:{op}" if domain and domain != "ai.onnx" else op
            return self._verdict(name, op, "unsupported", f"{shown}: no mapping in {framework}",
                                 None, self._fw(framework).get("source"), framework, hw, None)
        if rule.status == "unsupported":
            return self._verdict(name, op, "unsupported", rule.note, None, rule.source,
                                 framework, hw, rule.target)
        failures: list[Failure] = []
        for constraint in rule.constraints:
            failure = constraint.failure(node, op, hw)
            if failure is not None:
                failures.append(failure)
        if not failures:
            reason = rule.note if rule.status == "unverified" else f"maps to {rule.target}"
            return self._verdict(name, op, rule.status, reason, None, rule.source,
                                 framework, hw, rule.target)
        failures.sort(key=lambda f: f.status != "unsupported")
        status = "unsupported" if failures[0].status == "unsupported" else "unverified"
        reason = "; ".join(f.reason for f in failures)
        return self._verdict(name, op, status, reason, failures[0].constraint,
                             failures[0].source or rule.source, framework, hw, rule.target)

    def _verdict(self, name, op, status, reason, constraint, source, framework, hw, target) -> NodeVerdict:
        return NodeVerdict(name, op, status, reason, constraint, source, None, framework, hw, target,
                           self.citation(source))

    def describe(self, framework: str, hw: str, op_type: str) -> dict:
        """Everything the report page shows for one cell."""
        rule = self.op_rule(framework, hw, op_type)
        if rule is None:
            return {"status": "unsupported", "target": None, "note": f"{op_type}: no mapping",
                    "source": None, "constraints": []}
        return {
            "status": rule.status, "target": rule.target, "note": rule.note, "source": rule.source,
            "constraints": [
                {"text": c.text + (f" ({c.why})" if c.why else ""), "source": c.source,
                 "severity": c.severity}
                for c in rule.constraints if c.kind != "_max_rank"
            ],
        }

    def citations(self) -> dict[str, Citation]:
        """Every citation in the matrix, resolved (text -> Citation)."""
        from .schema import iter_citations

        return {text: self.citation(text) for _, text in iter_citations(self.data)}

    # ------------------------------------------------------------------ internals

    def _fw(self, framework: str) -> dict:
        try:
            return self.data["frameworks"][framework]
        except KeyError:
            raise BadInput(f"unknown framework '{framework}'; choose one of: "
                           f"{', '.join(self.frameworks)}") from None

    def _hw(self, framework: str, hw: str) -> dict:
        fw = self._fw(framework)
        try:
            return fw["hardware"][hw]
        except KeyError:
            raise BadInput(f"unknown hardware '{hw}' for {framework}; choose one of: "
                           f"{', '.join(fw['hardware'])}") from None

    def _table(self, framework: str, hw: str) -> dict[str, OpRule]:
        table = self._rules.get((framework, hw))
        if table is None:
            fw = self._fw(framework)
            self._hw(framework, hw)  # raises BadInput with the choices
            table = self._rules[(framework, hw)] = _Rules(self._op_compiler(framework, fw, hw), fw["ops"])
        return table

    def _validate_and_compile(self, validated: bool = False) -> None:
        """Validate the document (each constraint compiles there once); a validated document's
        tables are compiled when first asked for (a port needs one framework x hardware)."""
        if validated:
            return
        from .schema import validate

        validate(self.data, self._lines)
        for fw_name, fw in self.data["frameworks"].items():
            for hw_name in fw["hardware"]:
                self._rules[(fw_name, hw_name)] = self._compile_hw(fw_name, fw, hw_name)

    def _compile_hw(self, fw_name: str, fw: dict, hw_name: str) -> dict[str, OpRule]:
        compile_op = self._op_compiler(fw_name, fw, hw_name)
        return {op: compile_op(op) for op in fw["ops"]}

    def _op_compiler(self, fw_name: str, fw: dict, hw_name: str):
        """``compile_op(op) -> OpRule`` for one framework x hardware."""
        hw_spec = fw["hardware"][hw_name]
        like = hw_spec.get("like")
        max_rank = (hw_spec.get("properties") or {}).get("max_rank")
        rank_rule = _max_rank_constraint(max_rank, hw_spec.get("rank_source", hw_spec.get("source")))
        defaults = fw.get("defaults", {})

        def compile_op(op: str) -> OpRule:
            entry = fw["ops"][op]
            at = ("frameworks", fw_name, "ops", op)
            status = _entry_status(entry, defaults, hw_name, like)
            target = entry.get("target")
            source = (entry.get("sources") or {}).get(hw_name) or entry.get("source") or fw.get("source")
            notes = entry.get("notes") or {}
            note = notes.get(hw_name) or (notes.get(like) if like else None)
            if status == "unsupported" and not note:
                layer = target or op
                note = f"{op}: {hw_name} has no {layer}"
            elif status == "unsupported":
                note = f"{op}: {note}"
            elif status == "unverified" and not note:
                note = f"{op}: not documented for {hw_name} (unverified)"
            elif note:
                note = f"{op}: {note}"
            compiled: list[Constraint] = []
            if status != "unsupported":
                if rank_rule is not None and not entry.get("rank_exempt"):
                    compiled.append(rank_rule)
                for i, spec in enumerate(entry.get("constraints") or ()):
                    hws = spec.get("hw")
                    if hws is not None and hw_name not in hws and (like is None or like not in hws):
                        continue
                    try:
                        compiled.append(compile_constraint(spec, source))
                    except ConstraintError as err:  # schema.validate compiled it once already
                        fail(self._lines, at + ("constraints", i), str(err))
            return OpRule(op, status, target, source, note, tuple(compiled))

        return compile_op


class _Rules(Mapping):
    """One framework x hardware's rules of a validated matrix, each compiled when first looked
    up: a port reads a few ops' rules, not the hundreds of every table."""

    def __init__(self, compile_op, ops: dict):
        self._compile, self._ops, self._done = compile_op, ops, {}

    def __getitem__(self, op: str) -> OpRule:
        rule = self._done.get(op)
        if rule is None:
            if op not in self._ops:
                raise KeyError(op)
            rule = self._done[op] = self._compile(op)
        return rule

    def __iter__(self):
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)


def _entry_status(entry: dict, defaults: dict, hw: str, like: str | None) -> str:
    supported = entry.get("supported", defaults.get("supported", []) if "unverified" not in entry else [])
    unverified = entry.get("unverified", defaults.get("unverified", []) if "supported" not in entry else [])
    for name in (hw, like):
        if name is None:
            continue
        if supported == "all" or name in supported:
            return "supported"
        if unverified == "all" or name in unverified:
            return "unverified"
    return "unsupported"


def _max_rank_constraint(max_rank: int | None, source: str | None) -> Constraint | None:
    """The hardware-wide rank limit, checked on every input and output of every node."""
    if max_rank is None:
        return None

    def test(node, op):
        for label, tensors in (("input", node.inputs), ("output", node.outputs)):
            for i, tensor in enumerate(tensors):
                shape = getattr(tensor, "shape", None)
                if shape is not None and len(shape) > max_rank:
                    where = f"{label} {i}" if label == "input" or len(tensors) > 1 else "output"
                    return (True, f"on rank-{len(shape)} {where}")
        return None

    return Constraint("_max_rank", f"rank <= {max_rank}", None, None, source, "unsupported",
                      {"max_rank": max_rank}, test) if max_rank else None


@functools.lru_cache(maxsize=8)
def _load_cached(paths: tuple[str, ...], mtimes: tuple[float, ...]) -> Matrix:
    data, lines, validated = _read_base(Path(paths[0]))
    for overlay in paths[1:]:
        odata, olines = read_yaml_with_lines(Path(overlay))
        if not isinstance(odata, dict):
            raise MatrixFileError(f"{Path(overlay).name}:1: an overlay must be a mapping")
        data = merge_overlay(data, lines, odata, olines)
    return Matrix(data, lines, [Path(p) for p in paths], validated=validated and not paths[1:])


def _read_base(path: Path) -> tuple[dict, Lines, bool]:
    """(document, line map, whether it is known valid).  The packaged matrix comes from its
    parse cache (:mod:`.compiled`) once one process has parsed and validated it."""
    if path != DEFAULT_MATRIX.resolve():
        return (*read_yaml_with_lines(path), False)
    from . import compiled

    data, lines, key = compiled.load(path)
    if data is not None:
        return data, lines, True
    data, lines = read_yaml_with_lines(path)
    Matrix(data, lines, [path])  # validates (a bad matrix raises here and is never cached)
    compiled.store(path, key, data, lines)
    return data, lines, True


def load_matrix(path: str | Path | None = None, overlays: Iterable[str | Path] = ()) -> Matrix:
    """Load and validate the matrix (default: :data:`DEFAULT_MATRIX`, the packaged one).

    ``overlays`` are merged in order; each adds or overrides entries.  Results are cached per
    (files, modification times), so calling this for every model is cheap.
    """
    paths = [Path(path) if path else DEFAULT_MATRIX, *[Path(p) for p in overlays]]
    for p in paths:
        if not p.is_file():
            raise BadInput(f"matrix file not found: {p}")
    return _load_cached(tuple(str(p.resolve()) for p in paths),
                        tuple(p.stat().st_mtime for p in paths))
