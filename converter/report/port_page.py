"""``report.html`` of one port: check, plan, verification (with the per-layer rMSE chart) and
the support matrix for the model's ops.  One self-contained file: no network assets, no script
needed to read it, deterministic for the same report (timings aside)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..infra.fsutil import atomic_write_text

_STATUS_COLOR = {"supported": "#dafbe1", "unverified": "#fff8c5", "unsupported": "#ffebe9"}
_RESULT_COLOR = {"ok": "#1a7f37", "unsupported": "#9a6700", "verify_failed": "#cf222e", "needs_custom": "#9a6700",
                 "unverified": "#9a6700"}

_STYLE = """
body{font-family:system-ui,-apple-system,sans-serif;margin:2em;color:#1f2328}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #d0d7de;padding:3px 7px;
text-align:left;vertical-align:top;font-size:13px}th{background:#f6f8fa}code{font-size:12px}
.su{background:#dafbe1}.un{background:#fff8c5}.no{background:#ffebe9}.muted{color:#57606a}
h1{font-size:22px}h2{font-size:18px;margin-top:1.5em}svg{max-width:100%}
"""


def write_port_page(report: dict, model, matrix, path: Path, verification=None) -> Path:
    return atomic_write_text(path, build_port_page(report, model, matrix, verification))


def _reference_oracle() -> str:
    from ..runtimes import onnxruntime_oracle

    return onnxruntime_oracle().name


def build_port_page(report: dict, model, matrix, verification=None) -> str:
    esc = html.escape
    status = report.get("status", "?")
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>edgeconv port: {esc(str(report.get('model')))} → {esc(report['target'])}/{esc(report['hw'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{esc(str(report.get('model')))} → {esc(report['target'])}/{esc(report['hw'])}</h1>",
        f'<p><b style="color:{_RESULT_COLOR.get(status, "#cf222e")}">{esc(status)}</b>'
        + (f": {esc(report.get('reason', ''))}" if report.get("reason") else "") + "</p>",
        (f'<p class="oracle">target stage judged by <b>{esc(report["oracle"])}</b> '
         f'against {esc(_reference_oracle())}</p>' if report.get("oracle") else ""),
        _summary(report),
        _plan_table(report),
        _check_table(report),
    ]
    if report.get("postprocess"):
        parts.append(_postprocess_section(report["postprocess"]))
    if report.get("custom_layers"):
        parts.append("<h2>Custom layers</h2>" + _rows(
            ["node", "op", "why", "files"],
            [[c.get("node"), c.get("op"), c.get("why"), ", ".join(c.get("files", []))] for c in report["custom_layers"]]))
    if report.get("quantization"):
        from ..quantize.report import html_section as quantization_section

        parts.append(quantization_section(report["quantization"]))
    if verification is not None:
        from ..verify.report import html_section

        parts.append(html_section(verification))
    parts.append(_matrix_for_model_ops(report, model, matrix))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _postprocess_section(manifest: dict) -> str:
    esc = html.escape
    moved = ", ".join(f"{m['name']} ({m['op']})" for m in manifest.get("moved_nodes", []))
    boundary = _rows(["boundary tensor", "shape", "dtype", "passes straight through"],
                     [[b.get("name"), "x".join(map(str, b.get("shape", []))), b.get("dtype"),
                       "yes" if b.get("passthrough") else ""] for b in manifest.get("boundary", [])])
    merged = manifest.get("merged")
    merged_text = (f"<p>The boundary tensors are merged into one output <code>{esc(str(merged.get('name')))}</code>; "
                   "the layout is in <code>postproc/manifest.json</code>.</p>") if isinstance(merged, dict) else ""
    return ("<h2>Post-processing</h2><p>Trailing ops moved out of the model into generated code "
            "(<code>postproc/postprocess.py</code>, <code>postproc/postprocess.hpp</code>): "
            f"{esc(moved)}.</p>{boundary}{merged_text}"
            "<details><summary>manifest.json</summary>"
            f"<pre>{esc(json.dumps(manifest, indent=1, sort_keys=True, default=str))}</pre></details>")


def _summary(report: dict) -> str:
    rows = [
        ["command", f"<code>{html.escape(report.get('command_line') or '')}</code>"],
        ["edgeconv", html.escape(report.get("edgeconv_version", ""))],
        ["model sha256", f"<code>{html.escape(report.get('model_sha256', ''))}</code>"],
        ["ops before", html.escape(_hist(report.get("ops_before", {})))],
        ["ops after", html.escape(_hist(report.get("ops_after", {})))],
        ["rules applied", html.escape(", ".join(sorted({a["rule"] for a in report.get("applied_rules", [])})) or "none")],
        ["target files", "<br>".join(html.escape(f) for f in report.get("artifact", {}).get("files", []))],
        ["runtime used to verify", html.escape(report.get("artifact", {}).get("runtime", "") or "")],
        ["time per stage", html.escape(", ".join(f"{k} {v:.2f}s" for k, v in report.get("timings", {}).items()))],
    ]
    return "<h2>Summary</h2><table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _plan_table(report: dict) -> str:
    entries = report.get("plan", {}).get("entries", [])
    if not entries:
        return ""
    rows = [[e.get("node"), e.get("op"), e.get("verdict") if isinstance(e.get("verdict"), str)
             else (e.get("verdict") or {}).get("status"), e.get("remedy"), " → ".join(e.get("rules") or []),
             e.get("reason")] for e in entries]
    header = ["node", "op", "verdict", "remedy", "rules", "why"]
    needs = [r for r in rows if r[3] != "supported"]
    fine = [r for r in rows if r[3] == "supported"]
    body = _rows(header, needs) if needs else "<p>Every node is supported as it is.</p>"
    if fine:
        body += f"<details><summary>{len(fine)} supported nodes</summary>{_rows(header, fine)}</details>"
    plan = report.get("plan", {})
    return "<h2>Plan: a remedy per node</h2>" + body + _partitions(plan.get("partitions")) + \
        _may_stay_on_cpu(plan.get("may_stay_on_cpu", []))


def _may_stay_on_cpu(entries: list[dict]) -> str:
    if not entries:
        return ""
    return ("<h3>Supported, but the compiler may leave these on the CPU</h3>"
            + _rows(["node", "op", "shapes", "nodes after it", "why", "source"],
                    [[e["node"], e["op"], e["shapes"], e["after"], e["why"], e["source"]] for e in entries]))


def _partitions(partitions: dict | None) -> str:
    if not partitions:
        return ""
    esc = html.escape
    return (f"<h3>Partitions on {esc(partitions['hw'])} with fallback to {esc(partitions['fallback'])}</h3>"
            f"<p>{esc(partitions['summary'])}.</p>"
            + _rows(["accelerator partitions", "cpu partitions", "nodes on accelerator", "MACs on accelerator",
                     "tensors crossing units"],
                    [[partitions["accelerator_partitions"], partitions["cpu_partitions"],
                      f"{partitions['nodes_on_accelerator']} of {partitions['nodes']}",
                      f"{partitions['mac_share']:.1%}", ", ".join(partitions["boundary"])]]))


def _check_table(report: dict) -> str:
    check = report.get("check") or {}
    bad = [v for v in check.get("verdicts", []) if v.get("status") != "supported"]
    issues = check.get("model_issues", [])
    head = "<h2>Check against the support matrix</h2>"
    if not bad and not issues:
        return head + f"<p>All {len(check.get('verdicts', []))} nodes are supported on {html.escape(report['target'])}/{html.escape(report['hw'])}.</p>"
    rows = [[v.get("node"), v.get("op"), v.get("status"), v.get("reason"), _cite_link(v)] for v in bad]
    rows += [["(model)", i.get("kind"), i.get("status"), i.get("reason"), ""] for i in issues]
    return head + _rows(["node", "op", "status", "reason", "source"], rows)


def _matrix_for_model_ops(report: dict, model, matrix) -> str:
    """The matrix rows of the model's op types, every framework × hardware; this port's column
    is marked.  A cell is the op-level status (node constraints are in the check table)."""
    ops = sorted({n.op_type for n in model.graph.node})
    columns = [(fw, hw) for fw in matrix.frameworks for hw in matrix.hardware(fw)]
    head = "".join(
        f"<th>{html.escape(fw)}<br>{html.escape(hw)}{'<br>◀ this port' if (fw, hw) == (report['target'], report['hw']) else ''}</th>"
        for fw, hw in columns)
    body = []
    for op in ops:
        cells = []
        for fw, hw in columns:
            status = matrix.op_status(fw, hw, op) if hasattr(matrix, "op_status") else (
                "supported" if matrix.supports_op(fw, hw, op) else "unsupported")
            cls = {"supported": "su", "unverified": "un"}.get(status, "no")
            cells.append(f'<td class="{cls}" title="{html.escape(status)}">{ {"su": "✓", "un": "?", "no": "✗"}[cls] }</td>')
        body.append(f"<tr><th>{html.escape(op)}</th>{''.join(cells)}</tr>")
    return ("<h2>Support matrix for this model's ops</h2>"
            '<p class="muted">✓ supported, ? unverified (the vendor is silent), ✗ unsupported. '
            "The full interactive matrix: <code>edgeconv report --model MODEL</code>.</p>"
            f"<table><tr><th>op</th>{head}</tr>{''.join(body)}</table>")


class _Html(str):
    """A table cell that is markup already (not escaped again by ``_rows``)."""


def _cite_link(verdict: dict) -> str | None:
    """The verdict's source as a link to the cited upstream lines (plain text without a link)."""
    source, url = verdict.get("source"), (verdict.get("citation") or {}).get("url")
    if not source or not url:
        return source
    return _Html(f'<a href="{html.escape(url)}"><code>{html.escape(source)}</code></a>')


def _rows(header, rows) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f"<td>{c if isinstance(c, _Html) else html.escape('' if c is None else str(c))}</td>" for c in row)
            + "</tr>")
    return "".join(out) + "</table>"


def _hist(hist: dict) -> str:
    return f"{sum(hist.values())} nodes: " + ", ".join(
        f"{op} {n}" for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
