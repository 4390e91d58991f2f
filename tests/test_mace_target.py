"""MACE target: zoo round trip, determinism, YAML, and parsing with an independently compiled
``mace.proto`` (compiled from the untouched reference copy at test time)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from converter.demo import zoo
from converter.errors import Unsupported
from converter.targets.base import ExportOptions
from converter.targets.mace import TARGET
from converter.targets.mace._generated import mace_pb2

#: MACE's own mace.proto (verbatim, XiaoMi/mace@0fc55a5), committed beside the generated bindings.
PROTO = Path(mace_pb2.__file__).with_name("mace.proto")
MACE_ZOO = ("mobilenetv2", "resnet", "unet", "superres", "normalized_input")

from rank_runtimes import real_runtime_fixture  # noqa: E402

#: Every file these tests read back with the reader also runs in MACE's own runtime.
_real_runtime = real_runtime_fixture("mace")


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], sess.run(None, feeds)))


def _net(art):
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString((art.out_dir / f"{art.meta['name']}.pb").read_bytes())
    return multi.net_def[0]


@pytest.fixture(scope="module")
def exported(zoo_model, tmp_path_factory):
    out = {}
    for name in MACE_ZOO:
        model = zoo_model(name)
        art = TARGET.export(model, tmp_path_factory.mktemp(name), "cpu", ExportOptions(name=name))
        out[name] = (model, art)
    return out


@pytest.mark.parametrize("name", MACE_ZOO)
def test_zoo_round_trip_matches_onnxruntime(exported, name):
    model, art = exported[name]
    feeds = zoo.example_inputs(name)
    want = _ort(model, feeds)
    got = TARGET.run(art, feeds)
    assert art.runtime == "mace-reader+onnxruntime"
    for key, ref in want.items():
        assert got[key].shape == ref.shape
        assert float(np.max(np.abs(got[key] - ref))) <= 1e-5


def test_zoo_op_types_and_counts(exported):
    hist = {}
    for name in ("resnet", "superres", "mobilenetv2"):
        types = [op.type for op in _net(exported[name][1]).op]
        hist[name] = {t: types.count(t) for t in sorted(set(types))}
    assert hist["resnet"] == {"Activation": 7, "Conv2D": 9, "Eltwise": 3, "MatMul": 1, "Pooling": 1,
                              "Reduce": 1, "Reshape": 1}
    # output_padding=2 on a 9x9 stride-3 pad-4 deconv: Deconv2D without padding + 2 Slices.
    assert hist["superres"] == {"Activation": 5, "Conv2D": 5, "Deconv2D": 1, "Slice": 2}
    assert hist["mobilenetv2"]["DepthwiseConv2d"] == 4


def test_export_is_deterministic_and_yaml_checksums_match(zoo_model, tmp_path):
    model = zoo_model("unet")
    a = TARGET.export(model, tmp_path / "a", "cpu", ExportOptions(name="unet"))
    b = TARGET.export(model, tmp_path / "b", "cpu", ExportOptions(name="unet"))
    for fa, fb in zip(a.files, b.files):
        assert fa.read_bytes() == fb.read_bytes()
    doc = yaml.safe_load((tmp_path / "a" / "unet.yml").read_text())
    m = doc["models"]["unet"]
    assert m["model_sha256_checksum"] == hashlib.sha256((tmp_path / "a/unet.pb").read_bytes()).hexdigest()
    assert m["weight_sha256_checksum"] == hashlib.sha256((tmp_path / "a/unet.data").read_bytes()).hexdigest()
    assert m["runtime"] == "cpu" and m["platform"] == "onnx" and m["data_type"] == "fp32_fp32"
    assert m["subgraphs"][0]["input_shapes"] == ["1,3,32,32"]
    assert m["subgraphs"][0]["input_data_formats"] == ["NCHW"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["unet.data", "unet.pb", "unet.yml"]


@pytest.mark.parametrize("hw,runtime_type", [("cpu", 0), ("gpu", 2)])
def test_runtime_type_follows_hardware(zoo_model, tmp_path, hw, runtime_type):
    art = TARGET.export(zoo_model("normalized_input"), tmp_path, hw, ExportOptions(name="n"))
    net = _net(art)
    args = {a.name: a.i for a in net.arg}
    assert args["runtime_type"] == runtime_type  # include/mace/public/mace.h RuntimeType
    assert args["framework_type"] == 2 and args["data_format"] == 2
    assert yaml.safe_load((tmp_path / "n.yml").read_text())["models"]["n"]["runtime"] == hw


def test_dsp_refuses_ops_hexagon_lacks(zoo_model, tmp_path):
    with pytest.raises(Unsupported, match="dsp runtime has no 'MatMul'"):
        TARGET.export(zoo_model("resnet"), tmp_path, "dsp")
    assert not list(tmp_path.glob("*.pb"))


def test_fp16_weights_halve_the_data_file(zoo_model, tmp_path):
    model = zoo_model("resnet")
    full = TARGET.export(model, tmp_path / "f32", "cpu", ExportOptions(name="r"))
    half = TARGET.export(model, tmp_path / "f16", "cpu", ExportOptions(fp16_weights=True, name="r"))
    net = _net(half)
    assert net.data_type == 3 and all(t.data_type == 3 for t in net.tensors)  # DT_HALF
    n_elems = sum(t.data_size for t in net.tensors)
    assert len((tmp_path / "f16/r.data").read_bytes()) <= 2 * n_elems + 2 * len(net.tensors)
    assert len((tmp_path / "f32/r.data").read_bytes()) == 4 * n_elems
    feeds = zoo.example_inputs("resnet")
    err = np.max(np.abs(TARGET.run(half, feeds)["output"] - TARGET.run(full, feeds)["output"]))
    assert 0 < err < 5e-2


def test_unmapped_op_names_node_and_op(zoo_model, tmp_path):
    with pytest.raises(Unsupported, match=r"node '.*layernormalization.*' \(LayerNormalization\)"):
        TARGET.export(zoo_model("transformer"), tmp_path / "t", "cpu")
    with pytest.raises(Unsupported, match=r"Softmax.*axis 2 of a rank-5"):
        TARGET.export(zoo_model("detector"), tmp_path / "d", "cpu")
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").iterdir())


_INDEPENDENT_CHECK = textwrap.dedent(r"""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import mace_pb2  # compiled just now from the untouched upstream mace.proto
    pb, data = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(pb)
    net = multi.net_def[0]
    size = {1: 4, 3: 2, 4: 4, 2: 1}
    ends = [t.offset + t.data_size * size[t.data_type] for t in net.tensors]
    print(json.dumps({
        "nets": len(multi.net_def), "inputs": list(multi.input_tensor), "outputs": list(multi.output_tensor),
        "args": {a.name: a.i for a in net.arg}, "ops": [o.type for o in net.op],
        "aligned": all(t.offset % 4 == 0 for t in net.tensors), "max_end": max(ends), "data_len": len(data),
        "net_data_size": net.data_size,
        "reserialized_equal": multi.SerializeToString(deterministic=True) == pb,
        "input_info": [[i.name, list(i.dims), i.data_format] for i in net.input_info],
    }))
""")


def test_files_parse_with_freshly_compiled_reference_proto(exported, tmp_path):
    grpc_tools = pytest.importorskip("grpc_tools")
    (tmp_path / "mace.proto").write_bytes(PROTO.read_bytes())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"--python_out={tmp_path}",
                    str(tmp_path / "mace.proto")], check=True)
    assert grpc_tools and (tmp_path / "mace_pb2.py").exists()
    model, art = exported["superres"]
    out = subprocess.run([sys.executable, "-c", _INDEPENDENT_CHECK, str(tmp_path),
                          str(art.out_dir / "superres.pb"), str(art.out_dir / "superres.data")],
                         check=True, capture_output=True, text=True)
    info = json.loads(out.stdout)
    assert info["nets"] == 1 and info["inputs"] == ["input"] and info["outputs"] == ["output"]
    assert info["args"]["runtime_type"] == 0
    assert info["aligned"] and info["max_end"] == info["data_len"] == info["net_data_size"]
    assert info["reserialized_equal"]
    assert info["input_info"] == [["input", [1, 16, 16, 1], 1]]  # NHWC, data_format NHWC
    assert info["ops"].count("Deconv2D") == 1
