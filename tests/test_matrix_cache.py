"""The packaged matrix's parse cache (converter/matrix/compiled.py): same matrix, never stale.

Each test points ``DEFAULT_MATRIX`` at a copy of the packaged YAML in a temp directory, so the
cache it writes (``__pycache__/`` beside the copy) is its own.
"""

from __future__ import annotations

import shutil
import sys

import pytest

import converter.matrix as matrix_pkg
from converter.errors import BadInput
from converter.matrix import compiled


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A private copy of the packaged matrix standing in for it; the loader's cache is emptied."""
    copy = tmp_path / "data" / "op_support_matrix.yaml"
    copy.parent.mkdir()
    shutil.copyfile(matrix_pkg.DEFAULT_MATRIX, copy)
    monkeypatch.setattr(matrix_pkg, "DEFAULT_MATRIX", copy)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    matrix_pkg._load_cached.cache_clear()
    yield copy
    matrix_pkg._load_cached.cache_clear()


def _fresh_load():
    matrix_pkg._load_cached.cache_clear()
    return matrix_pkg.load_matrix()


def _verdicts(m) -> dict:
    """Every framework x hardware's compiled table, as comparable tuples."""
    out = {}
    for fw in m.frameworks:
        for hw in m.hardware(fw):
            out[(fw, hw)] = {op: (r.status, r.target, r.source, r.note, tuple(c.text for c in r.constraints))
                             for op, r in m._table(fw, hw).items()}
    return out


def test_cached_matrix_equals_the_parsed_one(packaged):
    first = _fresh_load()  # parses, validates, writes the cache
    cache = compiled._cache_path(packaged)
    assert cache.is_file()
    data, lines, _ = compiled.load(packaged)
    assert data == first.data and lines == first._lines
    second = _fresh_load()  # from the cache
    assert second.data == first.data and second._lines == first._lines
    assert _verdicts(second) == _verdicts(first)
    assert len(_verdicts(first)) == sum(len(first.hardware(fw)) for fw in first.frameworks) >= 20


def test_edited_matrix_is_parsed_again_never_served_stale(packaged):
    _fresh_load()
    text = packaged.read_text(encoding="utf-8")
    marker = "frameworks:\n"
    assert marker in text
    # a new comment changes the bytes (a new key), and a real edit changes the content
    packaged.write_text(text.replace("version: 1", "version: 1  # edited", 1), encoding="utf-8")
    assert compiled.load(packaged)[0] is None  # the old entry no longer matches
    _fresh_load()
    assert compiled.load(packaged)[0] is not None  # rewritten for the new bytes
    packaged.write_text(text.replace("version: 1", "version: 2", 1), encoding="utf-8")
    with pytest.raises(BadInput, match="version must be 1"):
        _fresh_load()  # validated again: the cache of the old file is not used
    assert compiled.load(packaged)[0] is None  # and an invalid matrix is never cached


def test_corrupt_or_foreign_cache_is_ignored(packaged):
    reference = _fresh_load()
    cache = compiled._cache_path(packaged)
    for junk in (b"", b"\x00garbage", cache.read_bytes()[:100]):
        cache.write_bytes(junk)
        m = _fresh_load()
        assert m.data == reference.data
        assert compiled.load(packaged)[0] == reference.data  # replaced by a good entry


def test_overlay_on_the_cached_base(packaged, tmp_path):
    _fresh_load()
    overlay = tmp_path / "no_conv.yaml"
    overlay.write_text("frameworks:\n  tflite:\n    ops:\n      Conv:\n        supported: []\n")
    matrix_pkg._load_cached.cache_clear()
    merged = matrix_pkg.load_matrix(overlays=[overlay])
    assert merged._table("tflite", "cpu")["Conv"].status == "unsupported"
    # the overlay never leaks into the cached base
    assert _fresh_load()._table("tflite", "cpu")["Conv"].status == "supported"


def test_nothing_written_when_python_writes_no_bytecode(packaged, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    m = _fresh_load()
    assert m._table("tflite", "cpu")["Conv"].status == "supported"
    assert not compiled._cache_path(packaged).exists()

