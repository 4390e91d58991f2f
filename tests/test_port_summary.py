"""The summary ``edgeconv port`` prints: written without rich on a pipe (converter/cli/commands/
plain_table.py), byte for byte what rich writes there; rich itself wherever the plain writer
could differ (markup brackets, wide characters, lines too wide, a terminal)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from converter.cli.commands import plain_table
from converter.cli.commands.port_summary import _summary, print_one


def _result(**changes):
    report = {"model": "models/resnet.onnx", "ops_before": {"Conv": 20, "Relu": 17, "Add": 8},
              "ops_after": {"Conv": 20, "Relu": 17, "Add": 8},
              "plan": {"entries": [{"remedy": "supported"}, {"remedy": "rewrite"}, {"remedy": "rewrite"}]},
              "applied_rules": [{"rule": "fold_bn", "node": "a"}, {"rule": "fold_bn", "node": "b"}]}
    report.update(changes.pop("report", {}))
    fields = dict(report=report, target="tflite", hw="cpu", status="ok", reason="", verification=None,
                  files=["legalized.onnx", "normalized.onnx", "report.html", "report.json", "resnet.tflite"],
                  timings={"load+normalize": 0.18, "check": 0.0, "legalize": 0.01, "export": 0.12},
                  oracle="LiteRT 2.3.0")
    fields.update(changes)
    return SimpleNamespace(**fields)


def _rich_text(result) -> str:
    from rich.console import Console

    out = io.StringIO()
    print_one(Console(file=out, width=200), result)
    return out.getvalue()


CASES = {
    "ok": _result(),
    "unsupported with a reason": _result(status="unsupported", reason="Loop: no remedy on tflite/cpu (see plan)"),
    "partitions": _result(report={"plan": {"entries": [], "partitions": {"summary": "2 npu partitions, 97% of MACs"}}}),
    "one file, no oracle": _result(files=["m.tflite"], oracle=""),
    "widest that fits": _result(reason="x" * (200 - 7 - len("rules applied") - len("verify_failed: ")),
                                status="verify_failed"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_plain_summary_is_what_rich_writes(name):
    result = CASES[name]
    header, rows = _summary(result)
    assert plain_table.fits(header, rows, 200)
    assert plain_table.render(header, rows) == _rich_text(result)


@pytest.mark.parametrize("changes", [
    {"reason": "x" * 300, "status": "unsupported"},  # rich wraps it
    {"reason": "needs [bold]markup[/] escaped", "status": "unsupported"},
    {"files": ["模型.tflite"]},  # two cells per character
    {"files": ["  padded.tflite"]},
    {"report": {"model": "m" * 201}},
])
def test_what_the_plain_writer_cannot_match_goes_through_rich(changes, capsys, monkeypatch):
    for name in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    result = _result(**changes)
    assert not plain_table.fits(*_summary(result), 200)
    print_one(None, result)  # stdout is pytest's capture: no terminal
    assert capsys.readouterr().out == _rich_text(result)


def test_plain_width_only_where_rich_writes_plain_text(monkeypatch):
    for name in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    assert plain_table.plain_width(io.StringIO()) == 200
    tty = SimpleNamespace(isatty=lambda: True, encoding="utf-8")
    assert plain_table.plain_width(tty) is None and not plain_table.not_a_terminal(tty)
    assert plain_table.plain_width(SimpleNamespace(isatty=lambda: False, encoding="latin-1")) is None
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert plain_table.plain_width(io.StringIO()) is None and not plain_table.not_a_terminal(io.StringIO())
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setenv("COLUMNS", "120")
    assert plain_table.plain_width(io.StringIO()) is None


def test_one_cell_wider_is_rich_s_wrapping_not_the_plain_table():
    result = _result(reason="x" * (200 - 7 - len("rules applied") - len("verify_failed: ") + 1), status="verify_failed")
    assert not plain_table.fits(*_summary(result), 200)
    assert plain_table.render(*_summary(result)) != _rich_text(result)  # the fallback is needed
