"""Per-target accuracy at a glance (issue 29 item 5): ``port --to all --quantize auto`` prints, per
framework x hardware, the precision chosen, the SQNR (held-out, naming the samples and what ran
the model), top-1 agreement, file size and LiteRT latency (converter/quantize/per_target.py);
each pair's report.html plots SQNR per layer for its worst layers (converter/quantize/layer_chart.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from quant_models import tiny_classifier_model

PAIRS = [("tflite", "cpu"), ("tnn", "arm"), ("mace", "cpu"), ("coreml", "cpu")]
HELD = "8 samples held out of the calibration set (seed 0)"


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    pytest.importorskip("ai_edge_litert")
    from converter.port import port

    tmp = tmp_path_factory.mktemp("per_target")
    onnx.save(tiny_classifier_model(), str(tmp / "tiny.onnx"))
    np.savez(tmp / "c.npz", x=np.random.default_rng(0).standard_normal((32, 1, 3, 16, 16)).astype(np.float32))
    results = port(str(tmp / "tiny.onnx"), to="all", quantize="auto", calibration=str(tmp / "c.npz"),
                   out=str(tmp / "out"))
    return results, tmp / "out"


def _report(out: Path, framework: str, hw: str) -> dict:
    return json.loads((out / f"{framework}-{hw}" / "report.json").read_text())


def _worst_output(judged: dict) -> dict:
    return min(judged["outputs"], key=lambda o: o["sqnr_db"])


def test_every_pair_has_a_row_with_the_numbers_of_its_report(ported):
    results, out = ported
    assert [(r.target, r.hw) for r in results] == PAIRS
    rows = {(r.target, r.hw): r.to_json()["quantization"] for r in results}
    precision = {("tflite", "cpu"): "int8 (auto)", ("tnn", "arm"): "int8 (auto)", ("mace", "cpu"): "uint8 (auto)",
                 ("coreml", "cpu"): "fp16 (auto)"}
    for (framework, hw), row in rows.items():
        report = _report(out, framework, hw)
        quant = report["quantization"]
        assert row["precision"] == precision[(framework, hw)]
        assert quant["samples"]["calibration"] == 24 or framework == "coreml"
        judged = quant["file_verification"] if framework != "coreml" else quant["verification"]
        worst = _worst_output(judged)
        assert row["sqnr_db"] == worst["sqnr_db"] and row["min_sqnr_db"] == worst["min_sqnr_db"]
        assert row["top1"] == worst["top1"] and 0.5 <= row["top1"] <= 1.0
        assert row["samples_from"] == judged["samples_from"]
        files = report["artifact"]["files"]
        assert row["file_bytes"] == quant["file_bytes"] == sum((out / f"{framework}-{hw}" / f).stat().st_size
                                                               for f in files) > 0
    assert re.fullmatch(r"LiteRT [\d.]+", rows[("tflite", "cpu")]["sqnr_by"])
    for pair in [("tflite", "cpu"), ("tnn", "arm"), ("mace", "cpu")]:
        assert rows[pair]["samples_from"] == HELD
        assert rows[pair]["sqnr_db"] > 30.0
    assert rows[("coreml", "cpu")]["sqnr_by"] == "onnxruntime (float16 model)"
    assert rows[("coreml", "cpu")]["samples_from"].startswith("the 32 samples of the calibration set")
    assert rows[("tnn", "arm")]["sqnr_by"].startswith("edgeconv TNN reader")
    # LiteRT latency for the TFLite file only: measured on one held-out sample, 1 thread
    latency = _report(out, "tflite", "cpu")["quantization"]["file_latency"]
    assert latency["threads"] == 1 and 3 <= latency["runs"] <= 20 and latency["median_ms"] > 0
    assert rows[("tflite", "cpu")]["latency_ms"] == latency["median_ms"]
    assert rows[("tflite", "cpu")]["latency_by"] == latency["runtime"] and "1 thread" in latency["runtime"]
    assert [rows[p]["latency_ms"] for p in PAIRS[1:]] == [None, None, None]


def test_the_console_prints_one_row_per_pair(ported):
    from rich.console import Console

    from converter.cli.commands.port_summary import print_many

    results, out = ported
    console = Console(record=True, width=400)
    print_many(console, results, [])
    text = console.export_text()
    table = text[text.index("Quantization per target:"):]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]
    assert [r[:3] for r in rows] == [["tflite", "cpu", "int8 (auto)"], ["tnn", "arm", "int8 (auto)"],
                                     ["mace", "cpu", "uint8 (auto)"], ["coreml", "cpu", "fp16 (auto)"]]
    for (framework, hw), row in zip(PAIRS, rows):
        quant = _report(out, framework, hw)["quantization"]
        judged = quant["file_verification"] if framework != "coreml" else quant["verification"]
        worst = _worst_output(judged)
        assert row[3] == f"{worst['sqnr_db']:.1f} dB (lowest {worst['min_sqnr_db']:.1f})"
        assert row[5] == judged["samples_from"] and row[6] == f"{worst['top1']:.0%}"
        assert re.fullmatch(r"\d+\.\d KiB|\d+ B", row[7])
    assert re.fullmatch(r"[\d.e-]+ ms \(LiteRT [\d.]+, CPU, 1 thread\)", rows[0][8])
    assert [r[8] for r in rows[1:]] == ["-", "-", "-"]
    why = [line for line in text.splitlines() if " auto: " in line]
    assert why == [f"{fw}/{hw} auto: {mode}, the lowest precision {fw}/{hw} runs ({dtypes}); every output met its "
                   f"SQNR floor with every layer in {mode}: nothing kept in float"
                   for (fw, hw), mode, dtypes in zip(PAIRS, ["int8", "int8", "uint8", "fp16"], [
                       "bool/float16/float32/int16/int32/int64/int8/uint8", "float16/float32/int8",
                       "bfloat16/float16/float32/int32/uint8", "bool/float16/float32/int32"])]


def test_the_report_page_plots_the_worst_layers(ported):
    _, out = ported
    page = (out / "tflite-cpu" / "report.html").read_text()
    rows = _report(out, "tflite", "cpu")["quantization"]["layers"]["rows"]
    finite = sorted((r for r in rows if isinstance(r["sqnr_db"], float)), key=lambda r: (r["sqnr_db"], r["node"]))
    svg = page[page.index('<svg xmlns="http://www.w3.org/2000/svg" class="sqnr-chart"'):]
    svg = svg[:svg.index("</svg>")]
    bars = re.findall(r'<rect class="layer" x="230" y="[\d.]+" width="([\d.]+)"', svg)
    values = re.findall(r'<text class="value" [^>]*>([-\d.]+)', svg)
    assert len(bars) == len(values) == min(12, len(finite)) >= 3
    assert values == [f"{r['sqnr_db']:.1f}" for r in finite[:12]]
    widths = [float(w) for w in bars]
    assert widths == sorted(widths) and widths[0] > 0  # lowest SQNR first, bars in proportion
    assert abs(widths[-1] / widths[0] - finite[len(widths) - 1]["sqnr_db"] / finite[0]["sqnr_db"]) < 1e-3


def test_a_pair_left_in_float_says_so():
    from converter.quantize.per_target import cells, target_row

    row = target_row("tflite", "gpu", {"status": "ok"})
    assert row.precision == "float32 (not quantized)" and row.sqnr_db is None
    assert cells(row) == ["tflite", "gpu", "float32 (not quantized)", "-", "-", "-", "-", "-", "-"]


def test_the_chart_is_empty_without_finite_layers_and_labels_measured_gains():
    from converter.quantize.layer_chart import sqnr_chart_svg, worst_rows

    assert sqnr_chart_svg([{"node": "a", "op": "Conv", "sqnr_db": "inf"}]) == ""
    rows = [{"node": f"n{k}", "op": "Conv", "sqnr_db": float(40 - k), "recovered_db": 0.4 if k == 3 else None}
            for k in range(20)]
    assert [r["node"] for r in worst_rows(rows)] == [f"n{k}" for k in range(19, 7, -1)]
    svg = sqnr_chart_svg(rows[:5])
    assert svg.count('<rect class="layer"') == 5
    assert "37.0, in float: +0.4 dB at the output" in svg
    assert svg == sqnr_chart_svg(list(reversed(rows[:5])))  # order of the table does not matter


def test_a_bias_correction_taken_from_the_varied_model_is_reported():
    """auto's keep-float variants take the base model's bias choice unscored (bias_correction._as_fixed):
    their record has no before/after numbers, and the report says where the choice came from."""
    from converter.quantize.report import bias_correction_line, html_section

    record = {"layers": 41, "applied": True, "add_ranges": "shared",
              "chosen_by": "the choice made for the model this one varies"}
    assert bias_correction_line(record) == "41 layers, the choice made for the model this one varies"
    assert "Bias correction: 41 layers, the choice made for the model this one varies." in html_section(
        {"plan": {"mode": "uint8"}, "bias_correction": record})
    scored = {**record, "samples": 16, "samples_from": "the 16 held-out samples", "sqnr_db_before": 18.0,
              "sqnr_db_after": 19.4}
    assert bias_correction_line(scored) == "41 layers, worst output SQNR 18.0 -> 19.4 dB on the 16 held-out samples"
