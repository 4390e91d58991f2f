"""Per-node verdicts for a normalized ONNX model against framework x hardware.

``check_model(model, "tnn", "rknpu")`` returns a :class:`CheckResult`: one
:class:`~converter.matrix.NodeVerdict` per node, plus model-level issues that come from the
hardware's properties (a float model on an int8-only accelerator, dynamic input dims where the
hardware needs static shapes, more model outputs than it can expose).

JSON (``edgeconv check --json``), schema ``edgeconv.check/1`` — stable; fields are only added::

    {
      "schema": "edgeconv.check/1",
      "model": "<path or name>",
      "ok": true|false,                      # every target ok
      "targets": [
        {
          "framework": "tnn", "hw": "rknpu", "ok": false,
          "counts": {"nodes": 12, "supported": 9, "unverified": 0, "unsupported": 3},
          "model_issues": [{"kind": "dtype"|"dynamic_shape"|"outputs", "status": "unsupported"|"unverified",
                            "reason": "...", "remedy": null|"postprocess"}],
          "verdicts": [{"node": "...", "op": "Conv", "status": "supported"|"unverified"|"unsupported",
                        "reason": "...", "constraint": null|"...",
                        "source": null|"Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190",
                        "remedy": null|"rewrite"|"postprocess"|"custom"|"retrain", "target": null|"...",
                        "citation": null|{"text": "<the source>", "repo": "Tencent/TNN",
                                          "commit": "<full 40-hex commit>", "path": "doc/en/user/support_en.md",
                                          "lines": [65, 190], "url": "https://github.com/Tencent/TNN/blob/..."}}]
        }
      ]
    }

``source`` is the matrix citation behind the verdict (the entry's, or the failed constraint's):
``owner/repo@commit:path#Lline`` or ``#Lfirst-Llast``, the upstream document itself.  ``citation``
(added in this schema version's lifetime, additive) is the same citation taken apart: the commit in
full as pinned by the matrix's ``upstreams:``, the first and last cited line, and the GitHub link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable

from ..matrix import Matrix, NodeVerdict, load_matrix

SCHEMA = "edgeconv.check/1"
_FLOAT_TYPES = {"float32", "float16", "bfloat16", "float64"}


@dataclass
class ModelIssue:
    kind: str
    status: str
    reason: str
    remedy: str | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "status": self.status, "reason": self.reason, "remedy": self.remedy}


@dataclass
class CheckResult:
    framework: str
    hw: str
    verdicts: list[NodeVerdict]
    model_issues: list[ModelIssue] = field(default_factory=list)
    #: where unsupported nodes would run instead: {"to", "reason", "source", "partitions"}
    #: (:func:`add_fallback`; None when every node is supported or it was not asked)
    fallback: dict | None = None

    @property
    def ok(self) -> bool:
        return all(v.supported for v in self.verdicts) and not any(
            i.status == "unsupported" for i in self.model_issues
        )

    @property
    def unsupported(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts if not v.supported]

    def counts(self) -> dict:
        counts = {"nodes": len(self.verdicts), "supported": 0, "unverified": 0, "unsupported": 0}
        for v in self.verdicts:
            counts[v.status] += 1
        return counts

    def summary(self) -> str:
        c = self.counts()
        issues = sum(1 for i in self.model_issues if i.status == "unsupported")
        extra = f", {issues} model issue(s)" if issues else ""
        verdict = "OK" if self.ok else "NOT SUPPORTED"
        return (f"{self.framework}/{self.hw}: {verdict}: {c['supported']} supported, "
                f"{c['unverified']} unverified, {c['unsupported']} unsupported of {c['nodes']} nodes{extra}")

    def to_json(self) -> dict:
        return {
            "framework": self.framework, "hw": self.hw, "ok": self.ok, "counts": self.counts(),
            "model_issues": [i.to_dict() for i in self.model_issues],
            "verdicts": [v.to_dict() for v in self.verdicts],
            **({"fallback": self.fallback} if self.fallback is not None else {}),
        }


def check_model(model, framework: str, hw: str, matrix: Matrix | None = None, *, graph=None) -> CheckResult:
    """Verdicts for every node of ``model`` (a normalized ONNX ModelProto) on framework x hw."""
    from ..ir.graph import to_graph

    matrix = matrix or load_matrix()
    graph = graph if graph is not None else to_graph(model)
    verdicts = [matrix.check_node(node, framework, hw) for node in graph.nodes]
    return CheckResult(framework, hw, verdicts, _model_issues(graph, matrix, framework, hw))


def check_targets(model, pairs: Iterable[tuple[str, str]], matrix: Matrix | None = None) -> list[CheckResult]:
    """``check_model`` for several (framework, hw) pairs, importing the graph once."""
    from ..ir.graph import to_graph

    matrix = matrix or load_matrix()
    graph = to_graph(model)
    return [check_model(model, fw, hw, matrix, graph=graph) for fw, hw in pairs]


def add_fallback(results: list[CheckResult], model, matrix: Matrix) -> None:
    """For each result with unsupported nodes: the runtime's fallback unit, and the partitions it
    would make after the planner's rewrites (:func:`converter.legalize.plan.plan_model`)."""
    from .plan import plan_model

    for r in results:
        if r.ok or not r.unsupported:
            continue
        fb = matrix.fallback(r.framework, r.hw)
        r.fallback = {"to": fb.to, "reason": fb.reason, "source": fb.source, "partitions": None}
        if fb.to is not None:
            plan = plan_model(model, r.framework, r.hw, matrix)
            r.fallback["partitions"] = plan.partitions.to_json() if plan.partitions else None


def results_to_json(results: list[CheckResult], model_name: str) -> dict:
    return {"schema": SCHEMA, "model": model_name, "ok": all(r.ok for r in results),
            "targets": [r.to_json() for r in results]}


def _model_issues(graph, matrix: Matrix, framework: str, hw: str) -> list[ModelIssue]:
    from ..ir.graph import dtype_name, static_shape

    props = matrix.properties(framework, hw)
    issues: list[ModelIssue] = []
    dtypes = props.get("dtypes")
    if dtypes and not (_FLOAT_TYPES & set(dtypes)):
        floats = [f"'{t.name}' is {dtype_name(t)}" for t in graph.inputs if dtype_name(t) in _FLOAT_TYPES]
        if floats:
            issues.append(ModelIssue(
                "dtype", "unsupported",
                f"{hw} runs only {'/'.join(dtypes)} models; input {', '.join(floats)} (quantize the model)"))
    if props.get("dynamic_shapes") is False:
        dynamic = [f"'{t.name}' {list(t.shape) if t.shape is not None else '?'}"
                   for t in graph.inputs if static_shape(t) is None]
        if dynamic:
            issues.append(ModelIssue(
                "dynamic_shape", "unsupported",
                f"{hw} needs static shapes; input {', '.join(dynamic)} (pass --input-shape)"))
    max_outputs = props.get("max_outputs")
    if max_outputs is not None and len(graph.outputs) > max_outputs:
        issues.append(ModelIssue(
            "outputs", "unsupported",
            f"{hw} exposes at most {max_outputs} model output(s); the model has {len(graph.outputs)}",
            remedy="postprocess"))
    return issues
