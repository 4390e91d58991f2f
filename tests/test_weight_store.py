"""Big weights held once, by reference (converter/ir/weights.py): the mechanisms and their bytes."""

from __future__ import annotations

import io
import sys

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.ir import weights
from converter.ir.graph import to_graph, to_model
from converter.frontend.load import load_onnx, save_onnx
from converter.port import PortRequest, PortSession, port
from converter.port.loading import load_stage

import test_large_model as large

#: 64 MiB of float32 weights: the size at which a port starts holding weights by reference.
ROWS = (64 << 20) // (large.DIM * 4)


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _referenced_model(store):
    """Two references (one with an explicit DEFAULT data_location, as onnx's loader leaves
    external tensors) among ordinary initializers, a doc string and metadata around them."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((512, 1024)).astype(np.float32)
    ints = np.arange(300_000, dtype=np.int64).reshape(1000, 300)
    a = numpy_helper.from_array(big, "a")
    a.data_location = TensorProto.DEFAULT
    b = numpy_helper.from_array(ints, "b")
    b.doc_string = "indices"
    small = numpy_helper.from_array(np.float32([1, 2, 3]), "small")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["a", "ids"], ["g"], axis=0), helper.make_node("Gather", ["b", "ids"], ["h"]),
         helper.make_node("Mul", ["g", "g"], ["out"])],
        "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 1024]),
         helper.make_tensor_value_info("h", TensorProto.INT64, [2, 300])], [a, small, b], doc_string="doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.metadata_props.add(key="k", value="v")
    full = model.SerializeToString()
    weights.hold(model, store)
    return model, full, big


def test_hold_refers_and_materialize_restores_the_bytes():
    store = weights.WeightStore()
    model, full, big = _referenced_model(store)
    assert [weights.is_reference(t) for t in model.graph.initializer] == [True, False, True]
    assert len(store.arrays) == 2 and model.ByteSize() < 4096  # the proto holds no weight bytes
    np.testing.assert_array_equal(weights.array_of(model.graph.initializer[0]), big)
    assert not weights.array_of(model.graph.initializer[0]).flags.writeable  # shared: read-only
    assert weights.materialized(model).SerializeToString() == full


def test_write_model_streams_exactly_the_materialized_bytes():
    store = weights.WeightStore()
    model, full, _ = _referenced_model(store)
    out = io.BytesIO()
    assert weights.write_model(model, out) == len(full)
    assert out.getvalue() == full


def test_save_onnx_streams_references(tmp_path):
    store = weights.WeightStore()
    model, full, _ = _referenced_model(store)
    save_onnx(model, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").read_bytes() == full
    assert weights.has_references(model)  # the model itself is unchanged


def test_graph_round_trip_shares_the_array_and_keeps_the_reference():
    store = weights.WeightStore()
    model, full, _ = _referenced_model(store)
    stored = store.arrays[0]
    with weights.holding(store):
        graph = to_graph(model)
        table = graph.tensors()["a"]
        assert table.values is stored  # no copy on import
        scaled = gs.Constant("scale", np.ones((256, 2, 1024), np.float32))  # a new big array (2 MiB)
        graph.nodes[2].inputs[1] = scaled
        exported = to_model(graph, cleanup=False)
    by_name = {t.name: t for t in exported.graph.initializer}
    assert weights.array_of(by_name["a"]) is stored  # the same key: no second copy
    assert weights.array_of(by_name["scale"]) is scaled.values  # a new array, added by reference
    assert len(store.arrays) == 3
    assert isinstance(table.values, np.ndarray) and table.values is stored  # export undid its swap
    # the table's bytes as the original held them (data_location DEFAULT kept)
    restored = {t.name: t for t in weights.materialized(exported).graph.initializer}["a"]
    original = {t.name: t for t in onnx.ModelProto.FromString(full).graph.initializer}["a"]
    assert restored.SerializeToString() == original.SerializeToString()


def test_onnxruntime_runs_references():
    from converter.runtimes.onnxruntime import run_session, session

    store = weights.WeightStore()
    model, full, big = _referenced_model(store)
    ids = np.array([3, 511], dtype=np.int64)
    got = run_session(session(model), {"ids": ids})
    np.testing.assert_array_equal(got["out"], big[ids] * big[ids])
    np.testing.assert_array_equal(got["h"], np.arange(300_000).reshape(1000, 300)[ids])


def test_load_onnx_reads_external_data_into_the_store(tmp_path):
    path = large._write_big_model(tmp_path, rows=ROWS // 16)
    store = weights.WeightStore()
    model = load_onnx(path, store)
    table = model.graph.initializer[0]
    assert weights.is_reference(table) and store.arrays[0].shape == (ROWS // 16, large.DIM)
    assert weights.materialized(model).SerializeToString() == load_onnx(path).SerializeToString()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_port_shares_weights_and_writes_the_same_bytes(tmp_path):
    """A 64 MiB model ported with full models (preloaded, as before the store) and by reference:
    the same files, byte for byte; by reference, the port's peak stays under 1.5x the weights
    above where it started (1.03x measured: the store's one copy; ~5 copies before)."""
    model_path = large._write_big_model(tmp_path, rows=ROWS)
    size = ROWS * large.DIM * 4
    request = PortRequest.from_flags(str(model_path))
    full = PortSession.with_models(request, *load_stage(request.source, True)).port_pair("tflite", "cpu",
                                                                                     tmp_path / "full")
    assert full.status == "ok"
    del full
    import gc

    gc.collect()
    before = _status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    shared = port(str(model_path), to="tflite", hw="cpu", out=tmp_path / "shared")
    peak = _status_bytes("VmHWM")
    assert shared.status == "ok"
    assert peak - before < 1.5 * size, f"peak {(peak - before) / size:.2f}x the weights above the start"
    for name in ("normalized.onnx", "legalized.onnx", "big.tflite"):
        assert (tmp_path / "shared" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is Linux's")
def test_onnxruntime_maps_weights_read_from_a_file(tmp_path):
    """A reference loaded from external data reaches onnxruntime as that file (mapped, only the
    rows a Gather reads come in), not as an external initializer onnxruntime copies."""
    from converter.runtimes.onnxruntime import run_session, session

    path = large._write_big_model(tmp_path, rows=ROWS)
    store = weights.WeightStore()
    model = load_onnx(path, store)
    size = ROWS * large.DIM * 4
    before = _status_bytes("VmRSS")
    sess = session(model)
    grown = _status_bytes("VmRSS") - before
    assert grown < size // 4, f"the session took {grown / size:.2f}x the weights"
    ids = large.lookup(ROWS)
    got = run_session(sess, {"ids": ids})["out"]
    np.testing.assert_array_equal(got, np.stack([large._row(int(i)) * 2 for i in ids]))


def test_streamed_flatbuffer_is_the_same_file_without_copying_the_weights(tmp_path):
    """The TFLite writer's streamed build: byte for byte the bytearray build, the big buffers
    never written into the builder's memory (their place stays zero pages), several holes."""
    from converter.targets.tflite._generated import schema_generated as fb
    from converter.targets.tflite.writer import STREAMED_MIN_BYTES, ModelWriter

    rng = np.random.default_rng(1)
    writer = ModelWriter()
    x = writer.tensor("x", (4, 1024))
    tables = [rng.standard_normal((512 * k, 1024)).astype(np.float32) for k in (1, 2)]
    out = x
    for k, table in enumerate(tables):
        ids = writer.constant(f"ids{k}", np.array([0, 3, 5, 511], np.int32))
        gathered = writer.tensor(f"g{k}", (4, 1024))
        writer.op("GATHER", [writer.constant(f"table{k}", table), ids], [gathered], fb.GatherOptionsT())
        added = writer.tensor(f"a{k}", (4, 1024))
        writer.op("ADD", [out, gathered], [added])
        out = added
    small = writer.constant("bias", np.ones((4, 1024), np.float32))  # under STREAMED_MIN_BYTES
    final = writer.tensor("y", (4, 1024))
    writer.op("ADD", [out, small], [final])
    plain = bytes(writer.serialize([x], [final]))
    streamed = writer.serialize([x], [final], streamed=True)
    assert len(streamed.holes) == 2 and all(v.nbytes >= STREAMED_MIN_BYTES for _, v in streamed.holes)
    assert len(streamed) == len(plain) and streamed.tobytes() == plain
    import hashlib

    assert streamed.sha256() == hashlib.sha256(plain).hexdigest()
    with open(tmp_path / "m.tflite", "wb") as f:
        streamed.write(f)
    assert (tmp_path / "m.tflite").read_bytes() == plain
    for start, view in streamed.holes:  # the builder left the weights' place untouched
        assert not any(streamed.memory[start:start + view.nbytes:4096])


def test_external_data_writer_takes_references(tmp_path):
    """A model over protobuf's limit is saved with external data: references write their arrays
    to the .data file and stay references in the model."""
    from converter.frontend.load import write_with_external_weights

    store = weights.WeightStore()
    model, full, big = _referenced_model(store)
    before = model.SerializeToString()
    write_with_external_weights(model, tmp_path / "m.onnx")
    assert model.SerializeToString() == before
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    by_name = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    np.testing.assert_array_equal(by_name["a"], big)
    np.testing.assert_array_equal(by_name["b"], np.arange(300_000).reshape(1000, 300))
