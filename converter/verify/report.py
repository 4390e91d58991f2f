"""Show a verification: a rich table in the terminal, a JSON dict, and an inline-SVG chart of
per-layer normalized rMSE for the HTML report (no scripts, no network assets)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

from .localize import LayerResult
from .stages import FAIL, PASS, SKIPPED, StageResult, VerifyReport


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


# --------------------------------------------------------------------------------------- JSON


def json_safe(value):
    """Non-finite floats become the strings "inf", "-inf", "nan" (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def to_json(report: VerifyReport) -> dict:
    """The report as a dict that ``json.dumps(..., allow_nan=False)`` accepts."""
    return json_safe(report.to_dict())


# -------------------------------------------------------------------------------- terminal


def table(report: VerifyReport):
    """A rich Table: one row per stage and output."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="verification against the original", title_justify="left")
    for col in ("stage", "output", "max abs", "max rel", "cosine", "SQNR dB", "atol/rtol", "result"):
        t.add_column(col, justify="right" if col not in ("stage", "output", "result") else "left",
                     no_wrap=col != "result")
    style = {PASS: "green", FAIL: "bold red", SKIPPED: "yellow"}
    for stage in report.stages:
        if not stage.outputs:
            t.add_row(escape(stage.name), "-", "", "", "", "", "",
                      f"[{style.get(stage.status, 'bold red')}]{stage.status}[/] {escape(stage.reason)}")
            continue
        for i, out in enumerate(stage.outputs):
            m = out.metrics
            verdict = "pass" if out.passed else "FAIL"
            if out.passed and out.judged_by == "noise floor":
                verdict = f"pass (within {out.noise_multiple:g}x float32 noise)"
            t.add_row(
                escape(stage.name) if i == 0 else "", escape(out.name),
                _fmt(m.max_abs if m else None), _fmt(m.max_rel if m else None),
                _fmt(m.cosine if m else None, 6), _fmt(m.sqnr_db if m else None, 4),
                f"{out.tolerance.atol:g}/{out.tolerance.rtol:g}",
                f"[{'green' if out.passed else 'bold red'}]{verdict}[/]" + ("" if out.passed or m else f" {escape(out.reason)}"),
            )
    return t


def layer_table(stage: StageResult, around: int = 3):
    """The layers around the first diverging one (rich Table), or None without a layer report."""
    from rich.markup import escape
    from rich.table import Table

    layers = stage.layers
    if layers is None or not layers.layers:
        return None
    first = layers.first
    lo = max(0, (first.index if first else 0) - around)
    hi = min(len(layers.layers), (first.index if first else 0) + around + 1)
    t = Table(title=f"per-layer normalized rMSE, stage '{escape(stage.name)}' (tolerance {layers.tolerance:.3g})",
              title_justify="left")
    # A target stage also shows the file's layer that computed each tensor (the target mapping).
    columns = ("#", "node", "op", "tensor", "rMSE") + ((f"{layers.target} layer",) if layers.target else ()) + ("by",)
    for col in columns:
        t.add_column(col, justify="right" if col in ("#", "rMSE") else "left")
    for layer in layers.layers[lo:hi]:
        mark = "bold red" if layer is first else ("red" if layer.above else "")
        target_cell = (f"{layer.candidate_node} ({layer.candidate_op})",) if layers.target else ()
        cells = [escape(str(c)) for c in (layer.index, layer.node, layer.op, layer.tensor, _fmt(layer.rmse),
                                          *target_cell, layer.by)]
        t.add_row(*[f"[{mark}]{c}[/]" if mark else c for c in cells])
    return t


def print_report(report: VerifyReport, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(table(report))
    for stage in report.stages:
        if stage.failed:
            lt = layer_table(stage)
            if lt is not None:
                console.print(lt)
            if stage.layers is not None:
                console.print(stage.layers.summary(), markup=False)
    console.print(report.summary(), markup=False, style="green" if report.ok else "bold red")
    if report.replay:
        console.print(f"replay inputs: {report.replay['inputs']}", markup=False)
        if report.replay.get("command"):
            console.print(f"reproduce: {report.replay['command']}", markup=False)


# ------------------------------------------------------------------------------------ chart


def _layer_fields(layer) -> dict:
    return layer.to_dict() if isinstance(layer, LayerResult) else dict(layer)


def rmse_chart_svg(
    layers: Iterable[LayerResult | dict],
    tolerance: float | None = None,
    title: str = "per-layer normalized rMSE",
    width: int = 760,
    height: int = 260,
    target: str | None = None,
) -> str:
    """An inline SVG bar chart (log scale) of per-layer normalized rMSE.

    One ``<rect class="layer ...">`` per layer, in order, each with a ``<title>`` tooltip naming
    the node, its op, its rMSE and the rule or mapping that produced it; layers above
    ``tolerance`` are red, the first of them darker and labelled; the tolerance is a dashed line.
    With ``target`` (a target stage) the label also names the file's layer type that computed it.
    """
    rows = [_layer_fields(layer) for layer in layers]
    values = [r["rmse"] for r in rows]
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    top_exp = max(0, math.ceil(math.log10(max(finite + [tolerance or 0, 1e-9]))))
    chart = _Chart(width, height, top_exp)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="rmse-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
        f"<title>{_esc(title)}</title>",
        f'<text x="{chart.left}" y="16" font-family="sans-serif" font-size="12">{_esc(title)}</text>',
    ]
    out += chart.axes()
    out += chart.bars(rows, tolerance, target)
    if tolerance is not None and tolerance > 0:
        out += chart.tolerance_line(tolerance)
    out.append(f'<text x="{chart.left + chart.plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle" '
               'font-family="sans-serif" font-size="10">layer (reference topological order)</text>')
    out.append("</svg>")
    return "\n".join(out)


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


_BAR_COLORS = {"ok": "#4a90d9", "above": "#e06666", "first": "#a61c00"}


class _Chart:
    """The plot area of :func:`rmse_chart_svg`: a log scale from 1e-9 to ``10**top_exp``."""

    FLOOR_EXP = -9
    left, right, top, bottom = 56, 12, 28, 40

    def __init__(self, width: int, height: int, top_exp: int):
        self.top_exp = top_exp
        self.plot_w, self.plot_h = width - self.left - self.right, height - self.top - self.bottom

    def y_of(self, value: float) -> float:
        if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
            exp = self.top_exp
        else:
            exp = min(max(math.log10(value) if value > 0 else self.FLOOR_EXP, self.FLOOR_EXP), self.top_exp)
        return self.top + self.plot_h * (self.top_exp - exp) / (self.top_exp - self.FLOOR_EXP)

    def axes(self) -> list[str]:
        """The grid lines with their powers of ten, and the two axes."""
        left, top, plot_w, plot_h = self.left, self.top, self.plot_w, self.plot_h
        out = []
        for exp in range(self.FLOOR_EXP, self.top_exp + 1, 3 if self.top_exp - self.FLOOR_EXP > 6 else 1):
            y = self.y_of(10.0 ** exp)
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd" stroke-width="1"/>')
            out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" font-family="sans-serif" '
                       f'font-size="10">1e{exp}</text>')
        out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#444" stroke-width="1"/>')
        out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444" stroke-width="1"/>')
        return out

    def bars(self, rows: list[dict], tolerance: float | None, target: str | None) -> list[str]:
        """One bar per layer (with its tooltip), the first layer above ``tolerance`` labelled,
        and every few layers' index under the axis."""
        left, top, plot_w, plot_h = self.left, self.top, self.plot_w, self.plot_h
        out = []
        n = len(rows)
        if n == 0:
            out.append(f'<text x="{left + 8}" y="{top + plot_h / 2:.1f}" font-family="sans-serif" font-size="12">'
                       "no layer compared</text>")
        step = plot_w / max(n, 1)
        bar = max(step * 0.8, 1.0)
        first_seen = False
        label_every = max(1, math.ceil(n / 40))
        for i, row in enumerate(rows):
            value = row["rmse"]
            above = bool(row.get("above")) if tolerance is None else (
                not isinstance(value, (int, float)) or math.isnan(value) or value > tolerance)
            kind = "ok"
            if above:
                kind = "above" if first_seen else "first"
                first_seen = True
            x = left + i * step + (step - bar) / 2
            y = min(self.y_of(value), top + plot_h - 1.0)  # a zero still gets a 1 px bar to hover over
            out.append(f'<rect class="layer {kind}" x="{x:.2f}" y="{y:.2f}" width="{bar:.2f}" '
                       f'height="{top + plot_h - y:.2f}" fill="{_BAR_COLORS[kind]}"><title>{_esc(_tooltip(i, row))}'
                       '</title></rect>')
            if kind == "first":
                mapped = f" -> {target} {row.get('candidate_op')}" if target and row.get("candidate_op") else ""
                out.append(f'<text class="first-label" x="{min(x, left + plot_w - 160):.2f}" '
                           f'y="{max(y - 4, top + 10):.2f}" font-family="sans-serif" font-size="11" fill="#a61c00">'
                           f'first: {_esc(row["node"])} ({_esc(row["op"])}{_esc(mapped)})</text>')
            if i % label_every == 0:
                out.append(f'<text x="{x + bar / 2:.2f}" y="{top + plot_h + 12}" text-anchor="middle" '
                           f'font-family="sans-serif" font-size="9">{i}</text>')
        return out

    def tolerance_line(self, tolerance: float) -> list[str]:
        y = self.y_of(tolerance)
        return [f'<line class="tolerance" x1="{self.left}" y1="{y:.1f}" x2="{self.left + self.plot_w}" y2="{y:.1f}" '
                'stroke="#a61c00" stroke-width="1" stroke-dasharray="4 3"/>',
                f'<text x="{self.left + self.plot_w}" y="{y - 3:.1f}" text-anchor="end" font-family="sans-serif" '
                f'font-size="10" fill="#a61c00">tolerance {tolerance:g}</text>']


def _tooltip(i: int, row: dict) -> str:
    tip = f"#{i} {row['node']} ({row['op']}) rMSE {_fmt(row['rmse'])}, by {row.get('by', '')}"
    if row.get("also_computes"):
        tip += f" (also computes {', '.join(row['also_computes'])})"
    return tip


# ------------------------------------------------------------------------------------- HTML


def html_section(report: VerifyReport) -> str:
    """An HTML fragment: the stage/output table and, per failing stage, its rMSE chart."""
    esc = html.escape
    parts = ['<section class="verify">', "<h2>Verification</h2>",
             f"<p>{esc(report.summary())}</p>",
             "<table><tr><th>stage</th><th>output</th><th>max abs</th><th>max rel</th><th>cosine</th>"
             "<th>SQNR dB</th><th>atol / rtol</th><th>result</th></tr>"]
    for stage in report.stages:
        if not stage.outputs:
            parts.append(f"<tr><td>{esc(stage.name)}</td><td colspan=6>{esc(stage.reason)}</td>"
                         f"<td>{esc(stage.status)}</td></tr>")
        for out in stage.outputs:
            m = out.metrics
            parts.append(
                f"<tr><td>{esc(stage.name)}</td><td>{esc(out.name)}</td><td>{_fmt(m.max_abs if m else None)}</td>"
                f"<td>{_fmt(m.max_rel if m else None)}</td><td>{_fmt(m.cosine if m else None, 6)}</td>"
                f"<td>{_fmt(m.sqnr_db if m else None, 4)}</td><td>{out.tolerance.atol:g} / {out.tolerance.rtol:g}</td>"
                f"<td>{'pass' if out.passed else 'FAIL: ' + esc(out.reason)}</td></tr>")
    parts.append("</table>")
    for stage in report.stages:
        if stage.failed and stage.layers is not None:
            against = (f" of the {esc(stage.layers.target)} file against the legalized model"
                       if stage.layers.target else "")
            parts.append(f"<h3>Stage {esc(stage.name)}: per-layer normalized rMSE{against}</h3>")
            parts.append(f"<p>{esc(stage.layers.summary())}</p>")
            parts.append(rmse_chart_svg(stage.layers.layers, stage.layers.tolerance,
                                        title=f"per-layer normalized rMSE, stage {stage.name}",
                                        target=stage.layers.target))
    if report.replay and report.replay.get("command"):
        parts.append(f"<p>Reproduce: <code>{esc(report.replay['command'])}</code></p>")
    parts.append("</section>")
    return "\n".join(parts)


def standalone_html(report: VerifyReport) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>edgeconv verify</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
            "</style></head><body>\n" + html_section(report) + "\n</body></html>\n")
