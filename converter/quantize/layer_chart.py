"""The report page's plot of the per-layer table: SQNR per layer for the worst layers, an inline
SVG (no script, no network asset, the same bytes for the same table).

One horizontal bar per layer, lowest SQNR first, each labelled with the layer, its op and its
SQNR; a layer whose keep-float gain was measured (:mod:`.recovery`) also shows what keeping it in
float recovers at the outputs, because a low local SQNR need not cost the output much.
"""

from __future__ import annotations

import html
import math

#: Layers drawn (the lowest SQNR ones).
WORST = 12
WIDTH, ROW, TOP, LABEL_W, BAR_W = 760, 18, 34, 230, 330


def worst_rows(rows: list[dict], count: int = WORST) -> list[dict]:
    """The ``count`` rows of lowest finite SQNR, lowest first (ties by name: deterministic)."""
    finite = [r for r in rows if isinstance(r.get("sqnr_db"), (int, float)) and math.isfinite(r["sqnr_db"])]
    return sorted(finite, key=lambda r: (r["sqnr_db"], str(r.get("node"))))[:count]


def sqnr_chart_svg(rows: list[dict], title: str = "SQNR per layer, worst layers (dB)") -> str:
    """The chart of ``worst_rows(rows)``; empty when no layer has a finite SQNR."""
    shown = worst_rows(rows)
    if not shown:
        return ""
    scale_max = max(10.0, 10.0 * math.ceil(max(r["sqnr_db"] for r in shown) / 10.0))
    height = TOP + ROW * len(shown) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="sqnr-chart" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{_esc(title)}">',
           f"<title>{_esc(title)}</title>",
           f'<text x="4" y="14" font-family="sans-serif" font-size="12">{_esc(title)}</text>']
    for tick in range(0, int(scale_max) + 1, 10):
        x = LABEL_W + BAR_W * tick / scale_max
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 8}" x2="{x:.1f}" y2="{height - 10}" stroke="#ddd" stroke-width="1"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP - 11}" text-anchor="middle" font-family="sans-serif" '
                   f'font-size="9">{tick}</text>')
    for i, row in enumerate(shown):
        out += _bar(i, row, scale_max)
    out.append("</svg>")
    return "\n".join(out)


def _bar(i: int, row: dict, scale_max: float) -> list[str]:
    y = TOP + i * ROW
    value = row["sqnr_db"]
    width = BAR_W * min(max(value, 0.0), scale_max) / scale_max
    label = f"{row.get('node')} ({row.get('op')})"
    recovered = row.get("recovered_db")
    gain = f", in float: {recovered:+.1f} dB at the output" if isinstance(recovered, (int, float)) else ""
    tip = f"{label}: {value:.1f} dB" + gain
    return [f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end" font-family="sans-serif" font-size="11">'
            f"{_esc(_short(label))}</text>",
            f'<rect class="layer" x="{LABEL_W}" y="{y + 3}" width="{width:.2f}" height="{ROW - 6}" fill="#4a90d9">'
            f"<title>{_esc(tip)}</title></rect>",
            f'<text class="value" x="{LABEL_W + width + 4:.2f}" y="{y + 12}" font-family="sans-serif" '
            f'font-size="10">{value:.1f}{_esc(gain)}</text>']


def _short(text: str, limit: int = 36) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _esc(text) -> str:
    return html.escape(str(text), quote=True)
