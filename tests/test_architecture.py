"""The package's shape, measured from its source (scripts/architecture_report.py): no import
cycle between modules, at most six modules directly under converter/, no function over the length
limit (but in the quantization files still being rewritten), and the stage packages' faces give
what they promise."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import architecture_report as report  # noqa: E402


def test_no_import_cycle_between_modules():
    found = report.modules()
    assert len(found) > 150  # the whole package was read
    assert report.cycles(report.import_graph(found)) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "converter"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from .y import g\n")
    (pkg / "a" / "y.py").write_text("from . import x\n")
    (pkg / "z.py").write_text("from .a import x\n")
    found = report.modules(pkg)
    assert report.cycles(report.import_graph(found)) == [["converter.a.x", "converter.a.y"]]


def test_few_modules_directly_under_the_package():
    assert report.top_level_modules() == ["__init__.py", "__main__.py", "errors.py"]


def test_legalize_face_gives_the_function():
    from converter.legalize import LegalizeResult, legalize
    from converter.legalize.apply import LegalizeResult as Result
    from converter.legalize.apply import legalize as apply_legalize

    assert legalize is apply_legalize and LegalizeResult is Result


def test_no_function_over_the_limit():
    """Every function is at most ``report.MAX_FUNCTION_LINES`` lines: the quantization files that
    were exempt are split now (quantize/port.py and auto.py into named steps, quantB's
    targets/mace/quantized.py), so nothing is."""
    assert report.long_functions(report.modules()) == []


def test_the_length_measure_finds_a_long_function(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "ROOT", tmp_path)
    pkg = tmp_path / "converter"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "long.py").write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 80)
    found = report.modules(pkg)
    assert report.long_functions(found) == [(81, "converter/long.py:5 long")]
