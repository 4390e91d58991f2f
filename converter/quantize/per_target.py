"""Per-target accuracy at a glance: one row per framework x hardware of a multi-target port
(``--to all --quantize auto``), read from each pair's ``report.json``.

A row says the precision the port chose there, the SQNR (median over the held-out samples of the
worst output, and its lowest sample) with what ran the model and on which samples, the top-1
agreement, the size of the exported file and, where the framework's runtime ran here (LiteRT),
its median latency.  The SQNR is the exported file's, run by its runtime or reader, when the
port judged the file; else the quantized model's in onnxruntime (a float16 file, a mode the
target does not write natively), and the row says which.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class TargetRow:
    framework: str
    hardware: str
    status: str
    #: "int8 full-integer (auto)", "fp16 (auto)", "float32 (no quantization)", "int8 (auto), 1 layer float".
    precision: str
    #: Median over the samples of the worst output's SQNR (dB), and that output's lowest sample.
    sqnr_db: float | None = None
    min_sqnr_db: float | None = None
    #: What computed the quantized outputs ("LiteRT 2.3.0", "onnxruntime (QDQ model)").
    sqnr_by: str = ""
    #: Which samples ("8 samples held out of the calibration set (seed 0)").
    samples_from: str = ""
    #: Top-1 agreement with the float model (lowest over class-score outputs), or None.
    top1: float | None = None
    #: Bytes of the exported file(s).
    file_bytes: int | None = None
    #: Median latency (ms) in the framework's runtime on this host, and what measured it.
    latency_ms: float | None = None
    latency_by: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def target_row(framework: str, hardware: str, report: dict) -> TargetRow:
    """The row of one pair from its ``report.json`` content."""
    quant = report.get("quantization")
    status = report.get("status", "?")
    if not quant:
        return TargetRow(framework, hardware, status, "float32 (not quantized)")
    judged = quant.get("file_verification") or {}
    if judged.get("outputs"):
        by = judged.get("runtime") or "its runtime"
    else:
        judged = quant.get("verification") or {}
        by = f"onnxruntime ({_MODEL_KIND.get(quant.get('plan', {}).get('mode'), 'quantized')} model)"
    outputs = [o for o in judged.get("outputs", []) if _number(o.get("sqnr_db")) is not None]
    worst = min(outputs, key=lambda o: _number(o["sqnr_db"])) if outputs else {}
    top1 = [o["top1"] for o in judged.get("outputs", []) if isinstance(o.get("top1"), float)]
    latency = quant.get("file_latency") or {}
    return TargetRow(framework, hardware, status, precision(quant), _number(worst.get("sqnr_db")),
                     _number(worst.get("min_sqnr_db")),
                     by if outputs else "", judged.get("samples_from", ""), min(top1) if top1 else None,
                     quant.get("file_bytes"), latency.get("median_ms"), latency.get("runtime", ""))


_MODEL_KIND = {"int8": "QDQ", "uint8": "QDQ", "fp16": "float16", "int8-weights": "int8-weight"}


def _number(value) -> float | None:
    """A JSON number, or one of report.json's "inf"/"-inf"/"nan" strings, as a float; else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(value) if value in ("inf", "-inf", "nan") else None


def precision(quant: dict) -> str:
    """The precision a pair's quantization chose, in a few words."""
    plan = quant.get("plan") or {}
    words = plan.get("mode", "?") + (" full-integer" if plan.get("full_integer") else "")
    if plan.get("given"):
        words += " (the input's own scales)"
    elif plan.get("auto"):
        words += " (auto)"
    kept = quant.get("float_nodes") or []
    if kept:
        words += f", {len(kept)} layer{'s' if len(kept) != 1 else ''} float: {', '.join(kept[:3])}" + \
            (", ..." if len(kept) > 3 else "")
    return words


def cells(row: TargetRow) -> list[str]:
    """The console table's cells of ``row`` (:data:`HEADER`)."""
    sqnr = "-" if row.sqnr_db is None else f"{row.sqnr_db:.1f} dB" + (
        "" if row.min_sqnr_db is None else f" (lowest {row.min_sqnr_db:.1f})")
    return [row.framework, row.hardware, row.precision, sqnr, row.sqnr_by or "-", row.samples_from or "-",
            "-" if row.top1 is None else f"{row.top1:.0%}", _size(row.file_bytes),
            "-" if row.latency_ms is None else f"{row.latency_ms:.3g} ms ({row.latency_by})"]


HEADER = ["framework", "hardware", "precision", "SQNR (median, worst output)", "computed by", "samples", "top-1",
          "size", "latency"]


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.2f} MiB"
