"""What a user declares about a model's inputs: shape, element type and the values to draw.

    -s input_ids=1x128:int64          shape 1x128, element type int64
    -s 1x3x224x224                    a bare shape names the first input (float32 for torch files)
    --input-range input_ids=0:30522   integers drawn from [0, 30522): valid token ids of a
                                      30522-word vocabulary
    --input-range pixel_values=0:1    floats drawn uniformly from [0, 1)

The command line, a batch manifest (``input_shapes: {input_ids: "1x128:int64"}``,
``input_ranges: {input_ids: "0:30522"}``) and the Python API (``input_shapes=``, ``input_ranges=``)
spell them the same way and end here.  The element type reaches the torch loaders (a TorchScript
file is traced with tensors of that type); for files that carry their own types (``.onnx``,
``.pt2``, TF) a declared type must agree with the file's.  Ranges are what verification and the
quantizer's evaluation draw (:func:`converter.runtimes.feeds.random_inputs`).  Every mistake is
one :class:`~converter.errors.BadInput` line.  No heavy imports here: the CLI parses flags first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..errors import BadInput

#: Element types ``-s NAME=SHAPE:DTYPE`` accepts (numpy's names, as ONNX's types map to them).
DTYPES = ("float32", "float16", "int64", "int32", "bool")
#: The half-open interval of values each type holds, for range checks.
LIMITS = {"float32": (-3.4028234663852886e38, 3.4028234663852886e38), "float16": (-65504.0, 65504.0),
          "int64": (-2 ** 63, 2 ** 63), "int32": (-2 ** 31, 2 ** 31), "bool": (0, 2)}

Shape = tuple[int, ...]
Span = tuple[float, float]


def parse_input_flags(flags: list[str] | None, option: str = "--input-shape") -> tuple[dict[str, Shape], dict[str, str]]:
    """``["ids=1x128:int64", "1x3x8x8"]`` -> ``({"ids": (1, 128), "": (1, 3, 8, 8)}, {"ids": "int64"})``."""
    shapes: dict[str, Shape] = {}
    dtypes: dict[str, str] = {}
    for flag in flags or []:
        name, _, spec = flag.rpartition("=")
        name = name.strip()
        dims, _, dtype = spec.partition(":")
        if not re.fullmatch(r"\d+(x\d+)*", dims.strip()):
            raise BadInput(f"{option} '{flag}': expected name=1x3x224x224 or name=1x128:int64 "
                           "(positive integers joined by 'x', then an optional :dtype)")
        shape = tuple(int(d) for d in dims.strip().split("x"))
        if any(d <= 0 for d in shape):
            raise BadInput(f"{option} '{flag}': every dimension must be positive")
        if name in shapes:
            raise BadInput(f"{option} given twice for '{name or 'the first input'}'")
        shapes[name] = shape
        if dtype.strip() or spec.endswith(":"):
            dtypes[name] = dtype_word(dtype.strip(), f"{option} '{flag}'")
    return shapes, dtypes


def dtype_word(word: str, where: str) -> str:
    """``word`` if it names an input type edgeconv declares, else one BadInput line listing them."""
    if word not in DTYPES:
        raise BadInput(f"{where}: unknown element type '{word}'; choose one of: {', '.join(DTYPES)}")
    return word


def parse_range(flag: str, option: str = "--input-range") -> tuple[str, Span]:
    """``"input=0:1"`` -> ``("input", (0.0, 1.0))``; a bare ``"0:1"`` names every float input (``""``)."""
    name, _, span = flag.rpartition("=")
    m = re.fullmatch(r"\s*([-+0-9.eE]+)\s*:\s*([-+0-9.eE]+)\s*", span)
    try:
        lo, hi = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise BadInput(f"{option} '{flag}': expected name=LOW:HIGH with LOW < HIGH, e.g. input_ids=0:30522 or image=0:1")
    return name.strip(), (lo, hi)


def parse_range_flags(flags: list[str] | None, option: str = "--input-range") -> dict[str, Span]:
    ranges: dict[str, Span] = {}
    for flag in flags or []:
        name, span = parse_range(flag, option)
        if name in ranges:
            raise BadInput(f"{option} given twice for '{name or 'every float input'}'")
        ranges[name] = span
    return ranges


def check_range(name: str, dtype: str, span: Span, option: str = "--input-range") -> None:
    """One line when ``span`` cannot be drawn for an input of ``dtype`` (a numpy type name)."""
    lo, hi = span
    if dtype in LIMITS:
        low, high = LIMITS[dtype]
        if lo < low or hi > high:
            raise BadInput(f"{option} {name}={lo:g}:{hi:g}: outside what {dtype} holds ([{low:g}, {high:g}))")
    if dtype != "bool" and not dtype.startswith("float") and not (float(lo).is_integer() and float(hi).is_integer()):
        raise BadInput(f"{option} {name}={lo:g}:{hi:g}: input '{name}' is {dtype}; give whole numbers "
                       "(integers are drawn from [LOW, HIGH))")
    if dtype == "bool" and not (float(lo).is_integer() and float(hi).is_integer()):
        raise BadInput(f"{option} {name}={lo:g}:{hi:g}: input '{name}' is bool; give 0:1 (all false), 1:2 "
                       "(all true) or 0:2")


def shapes_from_value(value, option: str = "input_shapes") -> tuple[dict[str, Shape], dict[str, str]]:
    """The API's and the manifest's spelling: ``["ids=1x128:int64"]`` (the command line's) or
    ``{"ids": [1, 128]}`` / ``{"ids": "1x128:int64"}`` -> (shapes, dtypes)."""
    if value is None:
        return {}, {}
    if isinstance(value, (list, tuple)):
        return parse_input_flags([str(v) for v in value], option)
    if not isinstance(value, Mapping):
        raise BadInput(f"{option}: expected a mapping of input name to a shape such as [1, 3, 224, 224] or "
                       f"'1x128:int64', got {type(value).__name__}")
    flags = []
    for name, dims in value.items():
        if isinstance(dims, str):
            flags.append(f"{name}={dims}")
        elif isinstance(dims, (list, tuple)) and dims and all(isinstance(d, int) and not isinstance(d, bool)
                                                                for d in dims):
            flags.append(f"{name}={'x'.join(str(d) for d in dims)}")
        else:
            raise BadInput(f"{option} '{name}': expected a list of positive integers or a string like '1x128:int64'")
    return parse_input_flags(flags, option)


def ranges_from_value(value, option: str = "input_ranges") -> dict[str, Span]:
    """``["ids=0:30522"]`` or ``{"ids": "0:30522"}`` / ``{"ids": [0, 30522]}`` -> ranges."""
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):
        return parse_range_flags([str(v) for v in value], option)
    if not isinstance(value, Mapping):
        raise BadInput(f"{option}: expected a mapping of input name to 'LOW:HIGH' or [LOW, HIGH]")
    flags = []
    for name, span in value.items():
        if isinstance(span, (list, tuple)) and len(span) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in span):
            span = f"{span[0]}:{span[1]}"
        if not isinstance(span, str):
            raise BadInput(f"{option} '{name}': expected 'LOW:HIGH' or [LOW, HIGH]")
        flags.append(f"{name}={span}")
    return parse_range_flags(flags, option)


#: Default half-open range of token-type (segment) ids: BERT's type_vocab_size is 2.
TOKEN_TYPE_RANGE = (0, 2)


def integer_role(name: str) -> str | None:
    """What an integer input's name says it holds: ``mask``, ``position``, ``token_type`` or None."""
    low = name.lower()
    if "mask" in low:
        return "mask"
    if "position" in low or low in ("pos_ids", "positions"):
        return "position"
    if "token_type" in low or "segment" in low:
        return "token_type"
    return None


def keyed_by_model(values: dict, input_names: list[str]) -> dict:
    """``values`` with ``""`` (the first input) replaced by the first of ``input_names``."""
    out = dict(values)
    if "" in out and input_names:
        out[input_names[0]] = out.pop("")
    return out


def check_declared(model, dtypes: dict[str, str], ranges: dict[str, Span], what: str = "the model") -> None:
    """Declared types and ranges against ``model``'s graph inputs (an ``onnx.ModelProto``): an
    unknown name, a type that differs from the file's or a range the type cannot hold is one line."""
    import onnx

    inits = {i.name for i in model.graph.initializer}
    inputs = {i.name: i.type.tensor_type.elem_type for i in model.graph.input if i.name not in inits}
    names = list(inputs)
    dtypes = keyed_by_model(dtypes, names)
    for name in [*dtypes, *(n for n in ranges if n)]:
        if name not in inputs:
            raise BadInput(f"no input named '{name}' in {what}; its inputs are: {', '.join(names) or 'none'}")
    for name, want in dtypes.items():
        have = onnx.helper.tensor_dtype_to_np_dtype(inputs[name]).name if inputs[name] else "undefined"
        if have != want:
            raise BadInput(f"input '{name}' of {what} is {have}; --input-shape declares {want} (a file's own "
                           "input types are kept: declare the type it has, or export it with the type you want)")
    for name, span in ranges.items():
        if name and inputs[name]:
            check_range(name, onnx.helper.tensor_dtype_to_np_dtype(inputs[name]).name, span)
