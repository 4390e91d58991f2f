"""End to end: cut model on onnxruntime + generated Python / C++ == the original model.

Models: the zoo's detector (Sub, Softmax, a skip connection into the final Mul) cut two ways,
one of them merged into a single output, and a segmentation head (Softmax, ReduceMax, ArgMax,
TopK) on the zoo's UNet.  The C++ of all cases is compiled once with g++ -Wall -Werror.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from converter.demo import zoo
from converter.errors import Unsupported
from converter.ir.graph import op_histogram, to_graph, to_model
from converter.postproc import split
from test_postproc_harness import build_harness, load_postprocess, max_abs_diff, needs_gxx, run_cpp, run_onnx

TOL = 1e-5


def segmentation_model(unet: onnx.ModelProto) -> onnx.ModelProto:
    """UNet logits -> Softmax(axis=1) -> ReduceMax (confidence) and ArgMax (labels) + TopK."""
    graph = to_graph(unet)
    logits = graph.outputs[0]
    n, c, h, w = logits.shape
    probs = gs.Variable("seg_probs", dtype=np.float32, shape=[n, c, h, w])
    conf = gs.Variable("confidence", dtype=np.float32, shape=[n, h, w])
    labels = gs.Variable("labels", dtype=np.int64, shape=[n, h, w])
    top_v = gs.Variable("top2_scores", dtype=np.float32, shape=[n, 2, h, w])
    top_i = gs.Variable("top2_classes", dtype=np.int64, shape=[n, 2, h, w])
    k = gs.Constant("top2_k", np.array([2], dtype=np.int64))
    graph.nodes += [
        gs.Node("Softmax", "seg_softmax", {"axis": 1}, [logits], [probs]),
        gs.Node("ReduceMax", "seg_reducemax", {"axes": [1], "keepdims": 0}, [probs], [conf]),
        gs.Node("ArgMax", "seg_argmax", {"axis": 1, "keepdims": 0}, [logits], [labels]),
        gs.Node("TopK", "seg_topk", {"axis": 1}, [probs, k], [top_v, top_i]),
    ]
    graph.outputs = [labels, conf, top_v, top_i]
    return onnx.shape_inference.infer_shapes(to_model(graph))


def mixed_dtype_model() -> onnx.ModelProto:
    """A float and an int64 boundary tensor (Mod has no kernel, so it stays): merging casts."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"], name="matmul"),
         helper.make_node("Softmax", ["a"], ["probs"], name="softmax"),
         helper.make_node("Mod", ["ids", "five"], ["m"], name="mod"),
         helper.make_node("Add", ["m", "one"], ["shifted"], name="add_int")],
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("shifted", TensorProto.INT64, [1, 3])],
        [numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 8, "w"),
         numpy_helper.from_array(np.array(5, np.int64), "five"), numpy_helper.from_array(np.array(1000, np.int64), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


CASES = {
    # name: (model, must_move, max_outputs)
    "det_softmax": ("detector", {"softmax_0"}, None),
    "det_merged": ("detector", {"sub_0", "sub_1", "softmax_0"}, 1),
    "seg": ("segmentation", {"seg_softmax", "seg_argmax"}, None),
    "mixed_merged": ("mixed", {"softmax", "add_int"}, 1),
}


@pytest.fixture(scope="module")
def models(zoo_model):
    return {"detector": zoo_model("detector"), "segmentation": segmentation_model(zoo_model("unet")),
            "mixed": mixed_dtype_model()}


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(5)
    return {"detector": zoo.example_inputs("detector", seed=3), "segmentation": zoo.example_inputs("unet", seed=4),
            "mixed": {"x": rng.standard_normal((1, 4)).astype(np.float32), "ids": rng.integers(-99, 99, (1, 3))}}


@pytest.fixture(scope="module")
def splits(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("postproc_split")
    out = {}
    for case, (model, must_move, max_outputs) in CASES.items():
        out[case] = split(models[model], must_move, max_outputs, root / case / "postproc",
                          cpp_namespace=f"pp_{case}")
    return root, out


@pytest.fixture(scope="module")
def harness(splits):
    root, results = splits
    cases = {case: (root / case / "postproc" / "postprocess.hpp", r.manifest) for case, r in results.items()}
    return build_harness(cases, root)


def test_detector_cut_keeps_only_legal_ops_and_finds_the_smallest_boundary(splits):
    _, results = splits
    cut = results["det_softmax"].cut
    assert cut.moved_nodes == ["softmax_0", "mul_0"]
    # the Sub feeding Softmax, the skip connection into Mul, and the kept 'boxes' output
    assert cut.boundary == ["reshape_0_1", "boxes", "sub_1_1"]
    assert cut.passthrough == ["boxes"]
    hist = op_histogram(results["det_softmax"].model)
    assert "Softmax" not in hist and "Mul" not in hist
    assert hist["Conv"] == 6 and hist["Sub"] == 2

    merged = results["det_merged"]
    # Sub+Softmax+Mul move; ReduceMax moves too, since that removes a boundary tensor
    assert merged.cut.moved_nodes == ["sub_0", "reducemax_0", "sub_1", "softmax_0", "mul_0"]
    assert len(merged.cut.boundary) == 3
    hist = op_histogram(merged.model)
    assert not {"Sub", "Softmax", "ReduceMax", "Mul"} & set(hist)
    assert hist["Concat"] == 1 and hist["Reshape"] == 2 + 3
    (output,) = merged.model.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [1, 256 + 1024 + 1280]
    layout = merged.manifest["merged"]["pieces"]
    assert [(p["offset"], p["numel"]) for p in layout] == [(0, 256), (256, 1024), (1280, 1280)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cut_model_plus_python_equals_original(case, models, feeds, splits):
    model_name, _, _ = CASES[case]
    result = splits[1][case]
    original = run_onnx(models[model_name], feeds[model_name])
    cut_outputs = run_onnx(result.model, feeds[model_name])
    module = load_postprocess(splits[0] / case / "postproc" / "postprocess.py", f"pp_{case}")
    restored = module.postprocess(cut_outputs)
    assert sorted(restored) == sorted(original)
    for name, want in original.items():
        err = max_abs_diff(restored[name], want)
        assert err <= TOL, (name, err)
        if want.dtype.kind in "iub":
            assert np.array_equal(restored[name], want), name


@needs_gxx
@pytest.mark.parametrize("case", sorted(CASES))
def test_cut_model_plus_cpp_equals_original(case, models, feeds, splits, harness):
    model_name, _, _ = CASES[case]
    result = splits[1][case]
    original = run_onnx(models[model_name], feeds[model_name])
    cut_outputs = run_onnx(result.model, feeds[model_name])
    restored = run_cpp(harness, case, result.manifest, cut_outputs, splits[0] / case / "run")
    for name, want in original.items():
        err = max_abs_diff(restored[name], want)
        assert err <= TOL, (name, err)
        if want.dtype.kind in "iub":
            assert np.array_equal(restored[name], want), name


def test_segmentation_head_moves_argmax_and_everything_after_softmax(splits):
    result = splits[1]["seg"]
    assert sorted(result.cut.moved_nodes) == ["seg_argmax", "seg_reducemax", "seg_softmax", "seg_topk"]
    assert len(result.cut.boundary) == 1  # the logits feed both Softmax and ArgMax
    assert result.manifest["ops"] == ["ArgMax", "ReduceMax", "Softmax", "TopK"]
    assert [o["dtype"] for o in result.manifest["outputs"]] == ["int64", "float32", "float32", "int64"]


def test_split_is_deterministic_and_files_are_written(models, splits, tmp_path):
    root, results = splits
    again = split(models["detector"], {"sub_0", "sub_1", "softmax_0"}, 1, tmp_path / "again",
                  cpp_namespace="pp_det_merged")
    first = results["det_merged"]
    assert again.model.SerializeToString() == first.model.SerializeToString()
    for name in ("postprocess.py", "postprocess.hpp", "manifest.json"):
        assert (tmp_path / "again" / name).read_bytes() == (root / "det_merged" / "postproc" / name).read_bytes()
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert manifest == first.manifest
    # only the kernels the program uses are emitted
    py = first.files["postprocess.py"]
    assert "def op_softmax" in py and "def op_topk" not in py and "def op_argmax" not in py
    hpp = first.files["postprocess.hpp"]
    assert "op_softmax(" in hpp and "op_topk(" not in hpp


def test_refused_split_raises_one_line_and_writes_nothing(models, tmp_path):
    with pytest.raises(Unsupported) as err:
        split(models["detector"], {"conv_4"}, None, tmp_path / "nothing")
    assert "conv_4" in str(err.value) and "Conv" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "nothing").exists() or not any((tmp_path / "nothing").iterdir())


def test_merging_mixed_dtypes_casts_to_float32_and_back(splits):
    result = splits[1]["mixed_merged"]
    merged = result.manifest["merged"]
    assert merged["dtype"] == "float32" and merged["shape"] == [1, 7]
    assert [(p["name"], p["dtype"], p["offset"]) for p in merged["pieces"]] == [("a", "float32", 0), ("m", "int64", 4)]
    assert op_histogram(result.model) == {"Cast": 1, "Concat": 1, "MatMul": 1, "Mod": 1, "Reshape": 2}
