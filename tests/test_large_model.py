"""A model over protobuf's 2 GB limit: load (external data), normalize, check, save, run."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from converter.frontend.load import load_model, save_onnx
from converter.frontend.normalize import check_equivalent, is_large, normalize

#: An embedding table of 2.15 GB (float32): over protobuf's 2 GiB message limit.
ROWS, DIM = 2_100_000, 256
LOOKUP = np.array([0, 7, ROWS // 2, ROWS - 1], dtype=np.int64)
assert ROWS * DIM * 4 > 2**31


def _row(i: int) -> np.ndarray:
    row = np.arange(DIM, dtype=np.float32) / DIM
    row[0] = i
    return row


def _write_big_model(tmp_path, rows: int = ROWS):
    """Written as such models exist on disk: a small .onnx pointing into a big .data file
    (by hand, so that no 2 GB protobuf is ever built in memory).  ``rows`` x 256 float32 weights
    (benchmarks/bench_memory.py writes a 1 GB one); it looks up rows ``lookup(rows)``."""
    data = tmp_path / "big.onnx.data"
    chunk = np.tile(_row(0), (100_000, 1))
    wanted = lookup(rows)
    with open(data, "wb") as f:
        for start in range(0, rows, len(chunk)):
            for i in wanted[(wanted >= start) & (wanted < start + len(chunk))]:
                chunk[i - start] = _row(int(i))
            f.write(chunk[: rows - start].tobytes())
            chunk[:] = _row(0)
    table = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[rows, DIM],
                        data_location=TensorProto.EXTERNAL)
    for key, value in (("location", data.name), ("offset", "0"), ("length", str(rows * DIM * 4))):
        table.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
         helper.make_node("Identity", ["emb"], ["emb_id"]),
         helper.make_node("Mul", ["emb_id", "scale"], ["out"])],
        "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, DIM])],
        [table, numpy_helper.from_array(np.float32(2.0).reshape(()), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (tmp_path / "big.onnx").write_bytes(model.SerializeToString())
    assert data.stat().st_size == rows * DIM * 4
    return tmp_path / "big.onnx"


def lookup(rows: int) -> np.ndarray:
    return np.array([0, 7, rows // 2, rows - 1], dtype=np.int64)


def test_model_over_two_gigabytes(tmp_path):
    loaded = load_model(_write_big_model(tmp_path))
    assert is_large(loaded)
    norm = normalize(loaded)
    assert [n.op_type for n in norm.graph.node] == ["Gather", "Mul"]  # Identity gone
    assert norm.opset_import[0].version == 17
    assert check_equivalent(loaded, norm) == 0.0
    del loaded

    out = tmp_path / "out" / "norm.onnx"
    save_onnx(norm, out)
    assert len(norm.graph.initializer[0].raw_data) == ROWS * DIM * 4  # the model was not modified
    assert sorted(p.name for p in out.parent.iterdir()) == ["norm.onnx", "norm.onnx.data"]
    del norm
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"ids": LOOKUP})[0]
    np.testing.assert_array_equal(got, np.stack([_row(int(i)) * 2 for i in LOOKUP]))
