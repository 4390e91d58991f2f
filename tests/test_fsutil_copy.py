"""``legalized.onnx`` as a kernel copy of ``normalized.onnx`` when legalization changed nothing
(converter/fsutil.py ``atomic_copy_file``)."""

from __future__ import annotations


def test_atomic_copy_file_copies_bytes_with_or_without_sendfile(tmp_path, monkeypatch):
    import os

    from converter.fsutil import atomic_copy_file

    src = tmp_path / "normalized.onnx"
    src.write_bytes(os.urandom((3 << 20) + 17))
    atomic_copy_file(src, tmp_path / "legalized.onnx")
    assert (tmp_path / "legalized.onnx").read_bytes() == src.read_bytes()

    def no_sendfile(*args):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", no_sendfile)
    atomic_copy_file(src, tmp_path / "again.onnx")
    assert (tmp_path / "again.onnx").read_bytes() == src.read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
