"""real_zoo's transformer set (issue 27): HuggingFace models built from their configs (random
init, nothing downloads), each saved three ways -- TorchScript (``torch.jit.trace``), an
ExportedProgram (``.pt2``, ``torch.export``) and torch's default ONNX export (the dynamo
exporter, opset 20) -- and each source ported to the targets and judged by the real runtimes.

    .venv/bin/python benchmarks/real_zoo.py --models transformers [--targets cpu] [--sources pt2,onnx]
    .venv/bin/python benchmarks/real_zoo.py --models distilbert,whisper_tiny_encoder --targets tflite:cpu

Needs ``transformers`` (the ``zoo`` extra).  Language models take int64 ``input_ids`` and
``attention_mask`` (BERT-style ones also ``token_type_ids``): the TorchScript source is ported
with ``-s input_ids=1x128:int64 ...``, the verification inputs are token ids over the whole
vocabulary and a mask padding the last quarter of the sequence.  Speech and vision models take
float features.  Tolerances follow real_zoo: the float32 noise floor of the eager model (float32
vs float64 on the same inputs) times ``NOISE_FACTOR``.
"""

from __future__ import annotations

import contextlib
import io
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("torchscript", "pt2", "onnx")
SEQUENCE = 128


@dataclass(frozen=True)
class TransformerEntry:
    name: str
    family: str
    #: transformers class names: the model and its config, and config overrides.
    model_class: str
    config_class: str
    config: dict
    #: ("input_ids", (1, 128), "int64", vocab) or ("pixel_values", (1, 3, 224, 224), "float32", None)
    inputs: tuple
    #: Which output to keep ("last_hidden_state", "logits").
    output: str = "last_hidden_state"


def _text(vocab: int, token_types: bool) -> tuple:
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    return tuple((n, (1, SEQUENCE), "int64", vocab if n == "input_ids" else 2) for n in names)


TRANSFORMERS = [
    # encoder-only language models at their published sizes
    TransformerEntry("distilbert", "language", "DistilBertModel", "DistilBertConfig", {}, _text(30522, False)),
    TransformerEntry("bert_base", "language", "BertModel", "BertConfig", {"add_pooling_layer": None},
                     _text(30522, True)),
    TransformerEntry("mobilebert", "language", "MobileBertModel", "MobileBertConfig", {}, _text(30522, True)),
    # speech: Whisper-tiny's encoder (two conv1d over 80 log-mel bins, 1500 positions)
    TransformerEntry("whisper_tiny_encoder", "speech", "WhisperEncoder", "WhisperConfig",
                     {"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                      "num_mel_bins": 80, "max_source_positions": 1500},
                     (("input_features", (1, 80, 3000), "float32", None),)),
    # vision
    TransformerEntry("vit_base", "vision", "ViTModel", "ViTConfig", {"add_pooling_layer": None},
                     (("pixel_values", (1, 3, 224, 224), "float32", None),)),
    TransformerEntry("mobilevitv2", "vision", "MobileViTV2Model", "MobileViTV2Config", {},
                     (("pixel_values", (1, 3, 256, 256), "float32", None),)),
    TransformerEntry("segformer_b0", "vision", "SegformerForSemanticSegmentation", "SegformerConfig", {},
                     (("pixel_values", (1, 3, 224, 224), "float32", None),), output="logits"),
]
BY_NAME = {e.name: e for e in TRANSFORMERS}


def build(entry: TransformerEntry, seed: int = 0):
    """The model in eval mode as an ``nn.Module`` returning one tensor, with seeded random
    weights and LayerNorm/BatchNorm parameters that are not their defaults (a converter that
    ignores an affine parameter must show up in the numbers)."""
    import torch

    from zoo_judging import import_torchvision, randomize_batchnorm

    import_torchvision()  # transformers imports torchvision: the CPU-build accommodation first
    import transformers

    config_kw = {k: v for k, v in entry.config.items() if k != "add_pooling_layer"}
    config = getattr(transformers, entry.config_class)(**config_kw)
    torch.manual_seed(seed)
    if entry.model_class == "WhisperEncoder":
        inner = transformers.WhisperModel(config).get_encoder()
    elif "add_pooling_layer" in entry.config:
        inner = getattr(transformers, entry.model_class)(config, add_pooling_layer=False)
    else:
        inner = getattr(transformers, entry.model_class)(config)
    model = _wrapped(torch, inner, [n for n, *_ in entry.inputs], entry.output)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm) and m.elementwise_affine:
                m.weight.copy_(torch.empty(m.weight.shape).uniform_(0.5, 1.5, generator=g))
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    if entry.family == "vision":
        randomize_batchnorm(model, entry.inputs[0][1], seed)
    return model.eval()


def _wrapped(torch, inner, names: list[str], output: str):
    """``inner`` with positional inputs named as the model names them (forward's parameter names
    name the graph inputs of all three sources) and one tensor output."""

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = inner

        def forward(self, input_ids, attention_mask):
            return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask), output)

    class TextWithTypes(Text):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids), output)

    class Speech(Text):
        def forward(self, input_features):
            return getattr(self.model(input_features=input_features), output)

    class Vision(Text):
        def forward(self, pixel_values):
            return getattr(self.model(pixel_values=pixel_values), output)

    kinds = {("input_ids", "attention_mask"): Text, ("input_ids", "attention_mask", "token_type_ids"): TextWithTypes,
             ("input_features",): Speech, ("pixel_values",): Vision}
    return kinds[tuple(names)]().eval()


def example_inputs(entry: TransformerEntry, seed: int = 0):
    """Token ids over the whole vocabulary, a mask padding the last quarter, token types 0/1,
    standard-normal features: a tuple of tensors in forward's order."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for name, shape, dtype, high in entry.inputs:
        if dtype == "int64" and "mask" in name:
            mask = torch.ones(shape, dtype=torch.int64)
            mask[..., shape[-1] * 3 // 4:] = 0
            out.append(mask)
        elif dtype == "int64":
            out.append(torch.randint(0, high, shape, generator=g))
        else:
            out.append(torch.randn(shape, generator=g))
    return tuple(out)


def save_source(model, example, kind: str, path: Path) -> None:
    """``model`` as TorchScript (.pt), an ExportedProgram (.pt2) or the dynamo exporter's .onnx."""
    import torch

    sink = io.StringIO()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        if kind == "torchscript":
            torch.jit.trace(model, example, check_trace=False, strict=False).save(str(path))
        elif kind == "pt2":
            torch.export.save(torch.export.export(model, example), str(path))
        else:
            names = list(model.forward.__code__.co_varnames[1:1 + len(example)])  # forward's parameters
            torch.onnx.export(model, example, str(path), input_names=names, output_names=["output"])


def noise_floor(model, example) -> float:
    """max |float32 - float64| of the eager model on ``example`` (integer inputs as they are)."""
    import copy

    import torch

    with torch.no_grad():
        low = model(*example)
        high = copy.deepcopy(model).double()(*[x.double() if x.is_floating_point() else x for x in example])
    return float((low.double() - high).abs().max())


def port_entry(entry: TransformerEntry, targets, work: Path, progress=print, sources=SOURCES, runtimes=None):
    """Build, save each source, port it to each target: real_zoo ``Cell`` s named ``name/source``.
    ``runtimes``: ``{"tnn": path, ...}``; real_zoo's ``--runtimes`` sets the environment instead."""
    import numpy as np

    from converter.port import PortRequest, PortSession
    from converter.port.loading import load_stage
    from zoo_judging import NOISE_FACTOR, Cell

    cells = []
    start = time.perf_counter()
    try:
        model = build(entry)
        example = example_inputs(entry)
        atol = max(1e-4, NOISE_FACTOR * noise_floor(model, example))
    except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not stop
        return [Cell(f"{entry.name}/{s}", entry.family, t, h, "error", f"build: {_line(err)}", 0.0)
                for s in sources for t, h in targets]
    progress(f"  {entry.name}: built in {time.perf_counter() - start:.1f} s (atol {atol:.1e})")
    shapes = [f"{n}={'x'.join(map(str, shape))}:{dtype}" for n, shape, dtype, _ in entry.inputs]
    for source in sources:
        label, begin = f"{entry.name}/{source}", time.perf_counter()
        path = work / f"{entry.name}.{ {'torchscript': 'pt', 'pt2': 'pt2', 'onnx': 'onnx'}[source]}"
        try:
            save_source(model, example, source, path)
            request = PortRequest.from_flags(str(path), input_shapes=shapes if source == "torchscript" else None,
                                             runtimes=runtimes or {})
            original, normalized = load_stage(request.source, True)
            names = [i.name for i in normalized.graph.input]
            inputs = work / f"{entry.name}.{source}.npz"
            np.savez(inputs, **{n: x.numpy() for n, x in zip(names, example)})
        except Exception as err:  # noqa: BLE001
            cells += [Cell(label, entry.family, t, h, "error", f"load: {_line(err)}", time.perf_counter() - begin)
                      for t, h in targets]
            progress(f"    {label}: load failed: {_line(err)[:150]}")
            continue
        progress(f"    {label}: saved + loaded in {time.perf_counter() - begin:.1f} s "
                 f"({len(normalized.graph.node)} nodes, opset {_opset(original)} as read)")
        session = PortSession.with_models(request, original, normalized, time.perf_counter() - begin)
        for target, hw in targets:
            cells.append(_port_one(session, label, entry.family, target, hw, work, inputs, atol, progress))
    return cells


def _port_one(session, label, family, target, hw, work, inputs, atol, progress):
    from converter.verify.spec import VerifySpec
    from zoo_judging import Cell, classify, tolerance_for

    start = time.perf_counter()
    atol_t, rtol_t = tolerance_for(target, hw, atol, float("inf"))
    try:
        result = session.port_pair(target, hw, work / label.replace("/", "-") / f"{target}-{hw}",
                                   verify=VerifySpec(inputs=str(inputs), atol=atol_t, rtol=rtol_t))
        verdict, detail, oracle = classify(result)
    except Exception as err:  # noqa: BLE001
        verdict, detail, oracle = "error", f"{type(err).__name__}: {_line(err)}", ""
        if "EDGECONV_DEBUG" in __import__("os").environ:
            traceback.print_exc()
    cell = Cell(label, family, target, hw, verdict, detail, time.perf_counter() - start, oracle, atol_t)
    progress(f"      {target:6} {hw:6} {verdict:10} {cell.seconds:6.1f} s  {oracle[:40]:40}  {detail[:100]}")
    return cell


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
