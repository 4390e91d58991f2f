"""``legalized.onnx`` as a kernel copy of ``normalized.onnx`` when legalization changed nothing
(converter/infra/fsutil.py ``atomic_copy_file``)."""

from __future__ import annotations


def test_atomic_copy_file_copies_bytes_with_or_without_sendfile(tmp_path, monkeypatch):
    import os

    from converter.infra.fsutil import atomic_copy_file

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


def test_files_of_an_output_dir_are_synced_in_the_background_before_it_is_published(tmp_path, monkeypatch):
    """Inside ``replace_output_dir`` a file's fsync runs in a thread (the write returns first);
    the directory is published only once every sync is done, and a failed sync fails the run
    (one BadInput naming the directory) without publishing it or leaving the temp directory."""
    import os
    import threading

    import pytest

    from converter.infra import fsutil, outdirs
    from converter.errors import BadInput

    synced, real_fsync = [], os.fsync

    def recording_fsync(fd):
        synced.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    fsutil.atomic_write_bytes(tmp_path / "plain.bin", b"x")
    assert synced == [threading.current_thread().name]  # outside: synced before it returns
    synced.clear()
    with outdirs.replace_output_dir(tmp_path / "out") as tmp:
        fsutil.atomic_write_bytes(tmp / "model.tflite", b"y" * 4096)
        fsutil.atomic_copy_file(tmp / "model.tflite", tmp / "copy.tflite")
    assert synced == ["edgeconv-fsync", "edgeconv-fsync"]
    assert (tmp_path / "out" / "copy.tflite").read_bytes() == b"y" * 4096

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(BadInput, match="Input/output error"):
        with outdirs.replace_output_dir(tmp_path / "new") as tmp:
            fsutil.atomic_write_bytes(tmp / "model.tflite", b"z")
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "plain.bin"]
    assert fsutil._BUILDING == {}


def test_a_file_is_synced_by_the_innermost_directory_being_built(tmp_path):
    import os

    from converter.infra import fsutil, outdirs

    with outdirs.replace_output_dir(tmp_path / "outer") as outer:
        with outdirs.replace_output_dir(outer / "inner") as inner:
            assert fsutil._deferred_syncs(inner / "m.tflite") is fsutil._BUILDING[os.path.abspath(inner)]
            assert fsutil._deferred_syncs(outer / "report.json") is fsutil._BUILDING[os.path.abspath(outer)]
            assert fsutil._deferred_syncs(tmp_path / "elsewhere.bin") is None
            fsutil.atomic_write_bytes(inner / "m.tflite", b"m")
    assert (tmp_path / "outer" / "inner" / "m.tflite").read_bytes() == b"m"
