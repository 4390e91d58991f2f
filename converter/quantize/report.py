"""The quantization section of a port's report: one line for the terminal, a section for
``report.html``.  Both read the JSON ``QuantResult.to_json`` puts in ``report.json``."""

from __future__ import annotations

import html

#: Rows of the per-layer table shown in the HTML page (worst first); the rest stay in the JSON.
TOP_LAYERS = 10


def bias_correction_line(record: dict | None) -> str:
    """One line on what bias correction did (empty when it was not tried)."""
    if not record:
        return ""
    if record.get("applied") and "sqnr_db_after" not in record:  # taken from the model this one varies
        return f"{record['layers']} layers, {record.get('chosen_by', 'chosen without scoring')}"
    if record.get("applied"):
        on = record.get("samples_from") or f"{record['samples']} calibration samples"
        return (f"{record['layers']} layers, worst output SQNR {record['sqnr_db_before']:.1f} -> "
                f"{record['sqnr_db_after']:.1f} dB on {on}")
    return f"not applied: {record.get('why', '')}"


def samples_line(quant: dict) -> str:
    """Which samples calibrated and which judged (empty when not recorded)."""
    samples = quant.get("samples") or {}
    if not samples:
        return ""
    if not samples.get("calibration"):
        return f"judged on {samples['held_out_from']}"
    return (f"ranges from {samples['calibration']} calibration samples; choices and verdict on "
            f"{samples['held_out_from']}")


def auto_line(quant: dict) -> str:
    """What ``--quantize auto`` chose and why (empty for other modes)."""
    plan = quant.get("plan") or {}
    if not plan.get("auto"):
        return ""
    reason = plan.get("reason", "")
    parts = [reason[len("auto: "):] if reason.startswith("auto: ") else reason]
    decisions = quant.get("auto_decisions", [])
    kept = [d for d in decisions if d.get("kept")]
    parts += [f"{d['layer']} -> {d['choice']}: {d['reason']}" for d in kept]
    parts += [d["reason"] for d in decisions if d.get("choice") == "none"]
    if not decisions:
        floor = "every output met its SQNR floor" if (quant.get("verification") or {}).get("ok") else \
            "outputs below their SQNR floor"
        parts.append(f"{floor} with every layer in {plan.get('mode')}: nothing kept in float")
    elif not kept:
        parts.append(f"no remedy kept ({len(decisions)} tried or weighed)")
    return "; ".join(parts)


def summary_line(quant: dict) -> str:
    plan = quant.get("plan") or {}
    mode = plan.get("mode", "?") + (" full-integer" if plan.get("full_integer") else "")
    parts = [f"{mode}: {quant.get('verification', {}).get('summary', '')}"]
    if samples_line(quant):
        parts.append(f"samples: {samples_line(quant)}")
    if quant.get("file_verification"):
        runtime = quant["file_verification"].get("runtime") or "its runtime"
        parts.append(f"exported file, run by {runtime}: {quant['file_verification']['summary']}")
        if (quant.get("file_layers") or {}).get("summary"):
            parts.append(f"per layer vs QDQ: {quant['file_layers']['summary']}")
    layers = quant.get("layers") or {}
    if layers.get("summary"):
        parts.append(f"per layer: {layers['summary']}")
    if quant.get("bias_correction"):
        parts.append(f"bias correction: {bias_correction_line(quant['bias_correction'])}")
    if auto_line(quant):
        parts.append(f"auto: {auto_line(quant)}")
    parts += quant.get("warnings", [])
    return "\n".join(parts)


def ranked_rows(rows: list[dict]) -> list[dict]:
    """The per-layer rows as :meth:`.debug.LayerTable.ranked` orders them: the measured keep-float
    gains first (largest first), then the local drops."""
    def number(value) -> float:
        return value if isinstance(value, float) else 0.0

    measured = sorted((r for r in rows if r.get("recovered_db") is not None), key=lambda r: -number(r["recovered_db"]))
    return measured + sorted((r for r in rows if r.get("recovered_db") is None), key=lambda r: -number(r.get("drop_db")))


def _signed(value) -> str:
    return f"{value:+.1f}" if isinstance(value, float) else ""


def _fmt(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else ("" if value is None else str(value))


def _table(header: list[str], rows: list[list]) -> str:
    esc = html.escape
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{esc(_fmt(c))}</td>" for c in row) + "</tr>" for row in rows]
    return "".join(out) + "</table>"


def html_section(quant: dict) -> str:
    esc = html.escape
    plan = quant.get("plan") or {}
    verification = quant.get("verification") or {}
    parts = ["<h2>Quantization</h2>",
             f"<p>{esc(plan.get('reason', ''))}; weights {'per channel' if plan.get('per_channel') else 'per tensor'}, "
             f"ranges by {esc(str(plan.get('method')))}. Files: <code>quantized.onnx</code> (QDQ), <code>float.onnx</code> "
             "(its reference), <code>quantization.json</code> (scales and zero points).</p>"]
    if quant.get("calibration"):
        parts.append(f"<p>Calibration: {esc(quant['calibration'].get('source', ''))}.</p>")
    if samples_line(quant):
        parts.append(f"<p>Samples: {esc(samples_line(quant))}.</p>")
    if auto_line(quant):
        parts.append(f"<p>Auto: {esc(auto_line(quant))}.</p>")
    if quant.get("bias_correction"):
        parts.append(f"<p>Bias correction: {esc(bias_correction_line(quant['bias_correction']))}.</p>")
    parts += [f"<p class='muted'>{esc(w)}</p>" for w in quant.get("warnings", [])]
    parts.append(f"<p><b>{esc(verification.get('summary', ''))}</b></p>")
    parts.append(_table(["output", "SQNR dB (median)", "lowest", "least allowed", "cosine", "max abs", "top-1", "top-5"],
                        [[o.get("name"), o.get("sqnr_db"), o.get("min_sqnr_db"), o.get("threshold_db"), o.get("cosine"),
                          o.get("max_abs"), o.get("top1"), o.get("top5")] for o in verification.get("outputs", [])]))
    native = quant.get("file_verification")
    if native:
        parts.append(f"<p>The exported file, run by {esc(native.get('runtime') or 'its runtime')}: "
                     f"<b>{esc(native.get('summary', ''))}</b></p>")
        parts.append(_table(["output", "SQNR dB (median)", "lowest", "least allowed", "cosine", "max abs", "top-1",
                             "top-5"], [[o.get("name"), o.get("sqnr_db"), o.get("min_sqnr_db"), o.get("threshold_db"),
                                         o.get("cosine"), o.get("max_abs"), o.get("top1"), o.get("top5")]
                                        for o in native.get("outputs", [])]))
        layers_vs_qdq = quant.get("file_layers") or {}
        if layers_vs_qdq.get("rows"):
            worst = sorted(layers_vs_qdq["rows"], key=lambda r: -(r["gap_db"] if isinstance(r.get("gap_db"), float)
                                                                  else 0.0))[:TOP_LAYERS]
            parts.append(f"<p>Per layer, the file against its QDQ model: {esc(layers_vs_qdq.get('summary', ''))}</p>")
            parts.append(_table(["tensor", "file layer", "file SQNR dB", "QDQ SQNR dB", "gap dB"],
                                [[r.get("tensor"), f"{r.get('layer_type')} {r.get('layer_name')}", r.get("file_sqnr_db"),
                                  r.get("qdq_sqnr_db"), r.get("gap_db")] for r in worst]))
    layers = quant.get("layers") or {}
    rows = layers.get("rows", [])
    if rows:
        parts.append(f"<h3>Per layer (worst {min(TOP_LAYERS, len(rows))} of {len(rows)})</h3>"
                     f"<p>{esc(layers.get('summary', ''))}</p>")
        from .layer_chart import sqnr_chart_svg

        parts.append(sqnr_chart_svg(rows))
        parts.append(_table(["layer", "op", "SQNR dB", "drop dB", "in float: output dB", "diagnosis", "why",
                             "suggestion"],
                            [[r.get("node"), r.get("op"), r.get("sqnr_db"), r.get("drop_db"),
                              _signed(r.get("recovered_db")), ", ".join(r.get("diagnosis", [])),
                              r.get("detail"), r.get("suggestion")] for r in ranked_rows(rows)[:TOP_LAYERS]]))
    decisions = quant.get("auto_decisions", [])
    if decisions:
        parts.append("<h3>Mixed precision (auto)</h3>")
        parts.append(_table(["layer", "diagnosis", "choice", "kept", "why"],
                            [[d.get("layer"), d.get("diagnosis"), d.get("choice"), "yes" if d.get("kept") else "no",
                              d.get("reason")] for d in decisions]))
    return "\n".join(parts)
