"""torch.export first: ``.pt2`` files, torch 2.13's default ``torch.onnx.export`` (the dynamo
exporter, opset 20) and live modules port like their TorchScript twins, judged by LiteRT,
tnn_run, mace_run and the CoreML executor."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from converter.demo import zoo
from converter.errors import BadInput
from converter.ir.graph import model_opset
from rank_runtimes import MACE_RUN, TNN_RUN, need

torch = pytest.importorskip("torch")

TARGETS = ("tflite", "tnn", "mace", "coreml")
ORACLES = {"tflite": "LiteRT", "tnn": "tnn_run", "mace": "mace_run", "coreml": "CoreML"}


def _sources(module, args, tmp: Path) -> dict[str, Path]:
    """The module as a TorchScript archive (the twin), a default ``torch.onnx.export`` file and
    an ExportedProgram archive."""
    paths = {kind: tmp / f"m{suffix}" for kind, suffix in (("torchscript", ".pt"), ("onnx", ".onnx"), ("pt2", ".pt2"))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(module, args), str(paths["torchscript"]))
        torch.onnx.export(module, args, str(paths["onnx"]))  # torch 2.13's defaults: dynamo, opset 20
        torch.export.save(torch.export.export(module, args), str(paths["pt2"]))
    return paths


def _verdicts(path: Path, shape, tmp: Path) -> dict[str, tuple[str, str]]:
    """(status, oracle) of a port of ``path`` to each target's CPU, loaded and normalized once."""
    from converter.port import PortRequest, PortSession

    need(TNN_RUN)
    need(MACE_RUN)
    request = PortRequest.from_flags(str(path), input_shapes={"": shape} if path.suffix == ".pt" else {},
                                     runtimes={"tnn": str(TNN_RUN), "mace": str(MACE_RUN)})
    with PortSession.open(request) as session:
        pairs = [pair for fw in TARGETS for pair in session.resolve(fw)]
        results = session.run(pairs, tmp / path.suffix[1:])
    assert session.loads == 1
    return {r.target: (r.status, r.oracle) for r in results}


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_from_dynamo_onnx_and_pt2_ports_as_its_torchscript_twin(name, tmp_path):
    module = zoo.build(name)
    args = tuple(torch.zeros(s) for s in zoo.input_shapes(name).values())
    paths = _sources(module, args, tmp_path)
    assert model_opset(onnx.load(paths["onnx"])) == 20  # what the user gets by default
    shape = next(iter(zoo.input_shapes(name).values()))
    twin = _verdicts(paths["torchscript"], shape, tmp_path)
    for kind in ("onnx", "pt2"):
        got = _verdicts(paths[kind], shape, tmp_path)
        assert {fw: s for fw, (s, _) in got.items()} == {fw: s for fw, (s, _) in twin.items()}, (kind, got, twin)
        for fw, (status, oracle) in got.items():
            assert status != "ok" or ORACLES[fw] in oracle, (fw, oracle)
    assert all(status == "ok" for status, _ in twin.values()), twin


class _Toy(torch.nn.Module):
    """The issue's toy: Conv+BN+GELU+LayerNorm+Linear, with a reflect pad in front."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)
        self.norm, self.fc = torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.bn(self.conv(torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")))
        y = torch.nn.functional.gelu(y).mean((2, 3))
        return self.fc(self.norm(y))


def _toy():
    torch.manual_seed(0)
    return _Toy().eval(), (torch.randn(1, 3, 8, 8),)


def test_toy_with_reflect_pad_and_gelu_ports_from_every_source(tmp_path):
    module, args = _toy()
    paths = _sources(module, args, tmp_path)
    twin = _verdicts(paths["torchscript"], (1, 3, 8, 8), tmp_path)
    assert {s for s, _ in twin.values()} == {"ok"}, twin
    for kind in ("onnx", "pt2"):
        assert _verdicts(paths[kind], (1, 3, 8, 8), tmp_path) == twin


def test_pt2_loads_at_the_exporters_own_opset_and_matches_torch(tmp_path):
    from converter.frontend.load import load_model
    from converter.frontend.normalize import CANONICAL_OPSET, normalize
    from tests.opset_cases import ort_run

    module, args = _toy()
    path = tmp_path / "toy.pt2"
    torch.export.save(torch.export.export(module, args), str(path))
    original = load_model(path)
    assert model_opset(original) == 20 and [i.name for i in original.graph.input] == ["x"]
    norm = normalize(original)
    assert model_opset(norm) == CANONICAL_OPSET
    assert {"Pad", "Erf"} <= {n.op_type for n in norm.graph.node}
    got = ort_run(norm, {"x": args[0].numpy()})[0]
    assert np.max(np.abs(got - module(*args).detach().numpy())) <= 1e-5


def test_live_module_gives_the_pt2_model(tmp_path):
    from converter.frontend.normalize import check_equivalent, normalize
    from converter.frontend.torch_module import load_module

    module, args = _toy()
    module.train()
    model = load_module(module, args)
    assert module.training  # the caller's module keeps its mode
    assert [i.name for i in model.graph.input] == ["x"] and len(model.graph.output) == 1
    assert check_equivalent(model, normalize(model)) <= 1e-5
    from tests.opset_cases import ort_run

    got = ort_run(model, {"x": args[0].numpy()})[0]
    assert np.max(np.abs(got - module.eval()(*args).detach().numpy())) <= 1e-5


def test_port_api_takes_a_live_module(tmp_path):
    """``converter.port.port(module, example_inputs, to=..., hw=...)``: the module through
    ``load_module`` (frontend/source.py), then the port as for a file."""
    from converter.port import port

    module, args = _toy()
    result = port(module, args, to="tflite", out=tmp_path / "out")
    assert result.status == "ok" and "LiteRT" in result.oracle
    assert result.files and all((tmp_path / "out" / f).exists() for f in result.files)
    with pytest.raises(BadInput, match=r"^a torch module \(_Toy\) needs example_inputs to be traced with$"):
        port(module, to="tflite", out=tmp_path / "out2")


@pytest.mark.parametrize("bad, needle", [
    (lambda: ("not a module", (torch.zeros(1),)), "expected a torch.nn.Module, got str"),
    (lambda: (_Toy(), ([1, 2, 3],)), "example inputs must be a tensor or a tuple of tensors"),
    (lambda: (_Toy(), (torch.zeros(1, 5, 8, 8),)), "_Toy: torch.export failed: "),
])
def test_bad_module_input_is_one_line(bad, needle):
    from converter.frontend.torch_module import load_module

    module, args = bad()
    with pytest.raises(BadInput) as err:
        load_module(module, args)
    assert needle in str(err.value) and "\n" not in str(err.value) and "Traceback" not in str(err.value)


def test_prelu_slopes_of_the_dynamo_exporter_lose_their_leading_ones():
    """The dynamo exporter writes per-channel PReLU slopes as [1, C, 1, 1] (shared between layers
    of equal slopes); normalization gives them the TorchScript exporter's [C, 1, 1], which the
    MACE exporter reads as per channel, with the same outputs."""
    from onnx import TensorProto, helper

    from converter.frontend.normalize import check_equivalent, normalize

    slope = onnx.numpy_helper.from_array(np.linspace(0.1, 0.4, 4, dtype=np.float32).reshape(1, 4, 1, 1), "s")
    nodes = [helper.make_node("PRelu", ["x", "s"], ["a"]), helper.make_node("PRelu", ["a", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])], [slope])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    norm = normalize(model)
    assert [list(t.dims) for t in norm.graph.initializer] == [[4, 1, 1]]
    assert check_equivalent(model, norm) == 0.0
