"""The preprocessing spec: how a decoded image becomes the model's input tensor.

``--preprocess`` takes an inline spec or a YAML file (a path ending in ``.yaml``/``.yml``)::

    --preprocess "rgb,resize=224x224,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=nchw"

Inline items (comma-separated, any order, each at most once):

============================  ==============================================================
``rgb`` / ``bgr`` / ``gray``  the channel order the *model* expects (default ``rgb``); images
                              always decode as RGB (or L for ``gray``), so ``bgr`` reverses
``resize=HxW``                height x width to resize to (bilinear, Pillow); default: the
                              model input's spatial size
``range=LO-HI``               pixels 0..255 are mapped linearly onto [LO, HI] (default ``0-1``;
                              ``0-255`` keeps them, ``-1-1`` is [-1, 1])
``mean=a/b/c``, ``std=a/b/c``  then ``(x - mean) / std`` per channel, listed in the model's
                              channel order, on the ``range`` scale (one value: every channel)
``layout=nchw`` / ``nhwc``    the model input's layout (default ``nchw``)
``input=NAME``                the model input the image feeds (default: the only 4-D input)
============================  ==============================================================

The YAML form has the same keys: ``{order: rgb, resize: [224, 224], range: [0, 1], mean: [...],
std: [...], layout: nchw, input: image}``.

The order of operations is fixed: decode -> RGB/L -> resize -> float32 -> range -> channel order
-> mean/std -> layout -> batch axis.  :func:`apply_spec` is the numpy reference every other form
(the folded model, the generated ``preprocess.py``/``preprocess.hpp``) is tested against.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from ..errors import BadInput, MissingExtra

ORDERS = ("rgb", "bgr", "gray")
LAYOUTS = ("nchw", "nhwc")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


@dataclass(frozen=True)
class PreprocessSpec:
    order: str = "rgb"
    #: (height, width), or None for the model input's spatial size (filled by :func:`bind`).
    resize: tuple[int, int] | None = None
    value_range: tuple[float, float] = (0.0, 1.0)
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str = "nchw"
    #: The model input; None until :func:`bind` picks it.
    input: str | None = None
    #: The model input's shape (filled by :func:`bind`).
    input_shape: tuple[int, ...] | None = None

    @property
    def channels(self) -> int:
        return 1 if self.order == "gray" else 3

    @property
    def channel_axis(self) -> int:
        return 1 if self.layout == "nchw" else 3

    def per_channel(self, values: tuple[float, ...]) -> np.ndarray:
        return np.array(values * self.channels if len(values) == 1 else values, dtype=np.float32)

    def affine(self) -> tuple[list[int], np.ndarray, np.ndarray]:
        """``(source, scale, offset)``: model channel ``c`` = pixel channel ``source[c]`` (0..255
        as decoded) * ``scale[c]`` + ``offset[c]``: the whole spec after resize, as one affine map."""
        lo, hi = self.value_range
        step = np.float64(hi - lo) / 255.0
        mean, std = self.per_channel(self.mean).astype(np.float64), self.per_channel(self.std).astype(np.float64)
        source = list(range(self.channels))[::-1] if self.order == "bgr" else list(range(self.channels))
        return source, step / std, (lo - mean) / std

    def to_dict(self) -> dict:
        return {"order": self.order, "resize": list(self.resize) if self.resize else None,
                "range": list(self.value_range), "mean": list(self.mean), "std": list(self.std),
                "layout": self.layout, "input": self.input,
                "input_shape": list(self.input_shape) if self.input_shape else None}


# ------------------------------------------------------------------------------------ parse


def parse_spec(text: str) -> PreprocessSpec:
    """An inline spec or a YAML file path -> :class:`PreprocessSpec`; mistakes are one BadInput line."""
    text = (text or "").strip()
    if not text:
        raise BadInput("--preprocess: empty spec; e.g. rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225")
    if text.lower().endswith((".yaml", ".yml")):
        return _from_mapping(_read_yaml(Path(text)), f"--preprocess {text}")
    items: dict = {}
    for raw in text.split(","):
        item = raw.strip()
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep:
            key, value = ("order", key) if key in ORDERS else (key, None)
        if value is None:
            raise BadInput(f"--preprocess: '{item}' is not an item; use rgb|bgr|gray or key=value "
                           "(resize, range, mean, std, layout, input)")
        if key in items:
            raise BadInput(f"--preprocess: '{key}' given twice")
        items[key] = value.strip()
    return _from_mapping(items, "--preprocess")


def _read_yaml(path: Path) -> dict:
    """The spec file, read by the matrix's YAML reader: aliases expand within its budget (an
    alias bomb is refused), keys are scalars, only a regular file is read."""
    from ..matrix.loader import read_yaml_with_lines

    if not path.exists():
        raise BadInput(f"--preprocess {path}: no such file")
    try:
        data, _ = read_yaml_with_lines(path)
    except BadInput as err:
        problem = str(err).replace("the matrix file", "the file").replace("matrix file", "file")
        raise BadInput(f"--preprocess {path}: {problem}") from None
    if not isinstance(data, dict):
        raise BadInput(f"--preprocess {path}: expected a mapping with keys order, resize, range, mean, std, layout, input")
    return data


_KEYS = ("order", "resize", "range", "mean", "std", "layout", "input")


def _from_mapping(items: dict, where: str) -> PreprocessSpec:
    unknown = sorted(str(k) for k in items if k not in _KEYS)
    if unknown:
        raise BadInput(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_KEYS)}")
    spec = PreprocessSpec()
    if "order" in items:
        order = str(items["order"]).lower()
        if order not in ORDERS:
            raise BadInput(f"{where}: order '{items['order']}' is not one of {', '.join(ORDERS)}")
        spec = replace(spec, order=order)
    if "layout" in items:
        layout = str(items["layout"]).lower()
        if layout not in LAYOUTS:
            raise BadInput(f"{where}: layout '{items['layout']}' is not one of {', '.join(LAYOUTS)}")
        spec = replace(spec, layout=layout)
    if "resize" in items:
        spec = replace(spec, resize=_size(items["resize"], where))
    if "range" in items:
        spec = replace(spec, value_range=_range(items["range"], where))
    for key in ("mean", "std"):
        if key in items:
            values = _numbers(items[key], f"{where}: {key}")
            if len(values) not in (1, spec.channels):
                raise BadInput(f"{where}: {key} has {len(values)} values; {spec.order} has {spec.channels} channel(s)")
            if key == "std" and any(v <= 0 for v in values):
                raise BadInput(f"{where}: std values must be > 0, got {'/'.join(map(str, values))}")
            spec = replace(spec, **{key: tuple(values)})
    if "input" in items:
        spec = replace(spec, input=str(items["input"]))
    _check_float32(spec, where)
    return spec


def _check_float32(spec: PreprocessSpec, where: str) -> None:
    """The spec's numbers and what it makes of pixels 0 and 255 must be finite float32 values
    (the model input's type; :func:`apply_spec` computes in it), and std nonzero in it: else
    every preprocessed image would be Inf or NaN, and the error would blame the images."""
    lo, hi = spec.value_range
    with np.errstate(all="ignore"):
        given = np.array([lo, hi, *spec.mean, *spec.std], np.float64).astype(np.float32)
        step = np.float32((hi - lo) / 255.0)
        ends = (np.array([[lo], [hi]], np.float32) - spec.per_channel(spec.mean)) / spec.per_channel(spec.std)
    if np.isfinite(given).all() and np.isfinite(ends).all() and step > 0 and (spec.per_channel(spec.std) > 0).all():
        return
    numbers = (f"range={lo:g}-{hi:g}, mean={'/'.join(f'{v:g}' for v in spec.mean)}, "
               f"std={'/'.join(f'{v:g}' for v in spec.std)}")
    raise BadInput(f"{where}: {numbers} gives values float32 cannot hold (Inf, NaN or a zero std); "
                   "choose numbers nearer 1, as in range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225")


def _numbers(value, where: str) -> list[float]:
    parts = value if isinstance(value, (list, tuple)) else str(value).split("/")
    try:
        numbers = [float(p) for p in parts]
    except (TypeError, ValueError):
        raise BadInput(f"{where}: expected numbers separated by '/', got {value!r}") from None
    if not numbers or not all(np.isfinite(numbers)):
        raise BadInput(f"{where}: expected finite numbers, got {value!r}")
    return numbers


def _size(value, where: str) -> tuple[int, int]:
    parts = value if isinstance(value, (list, tuple)) else re.split(r"[xX]", str(value))
    try:
        h, w = (_whole(p) for p in parts)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise BadInput(f"{where}: resize must be HEIGHTxWIDTH in whole pixels, e.g. 224x224; got {value!r}") from None
    if h <= 0 or w <= 0:
        raise BadInput(f"{where}: resize must be positive, got {value!r}")
    return h, w


def _whole(part) -> int:
    """A pixel count: an int, or text/a float with a whole value (``"224"``, ``224.0``)."""
    if isinstance(part, bool):
        raise TypeError("a boolean is not a size")
    number = float(part) if isinstance(part, float) else int(str(part).strip())
    if number != int(number):
        raise ValueError("not whole")
    return int(number)


def _range(value, where: str) -> tuple[float, float]:
    if isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        m = re.fullmatch(r"\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*[-:]\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*", str(value))
        parts = [m.group(1), m.group(2)] if m else []
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: range must be LOW-HIGH, e.g. 0-1, 0-255 or -1-1; got {value!r}") from None
    if not lo < hi:
        raise BadInput(f"{where}: range needs LOW < HIGH, got {value!r}")
    return lo, hi


# ------------------------------------------------------------------------------------- bind


def image_inputs(model: onnx.ModelProto) -> list[tuple[str, tuple]]:
    """The model's float graph inputs of rank 4, with their shapes."""
    from ..runtimes.feeds import input_specs

    return [(s.name, s.shape) for s in input_specs(model) if len(s.shape) == 4 and np.issubdtype(s.dtype, np.floating)]


def bind(spec: PreprocessSpec, model: onnx.ModelProto) -> PreprocessSpec:
    """The spec with its model input chosen and checked: a spec that contradicts the input's
    shape (channel count, layout, resize size, batch) is one BadInput line."""
    candidates = image_inputs(model)
    if spec.input is not None:
        match = [c for c in candidates if c[0] == spec.input]
        if not match:
            names = ", ".join(n for n, _ in candidates) or "none"
            raise BadInput(f"--preprocess: input '{spec.input}' is not a 4-D float input of the model (those: {names})")
        name, shape = match[0]
    elif len(candidates) == 1:
        name, shape = candidates[0]
    else:
        names = ", ".join(n for n, _ in candidates)
        raise BadInput(f"--preprocess: the model has {len(candidates)} 4-D float inputs ({names or 'none'}); "
                       "name one with input=NAME")
    if not all(isinstance(d, int) for d in shape):
        raise BadInput(f"--preprocess: input '{name}' has a dynamic shape {list(shape)}; fix it with --input-shape")
    batch, *rest = shape
    channels = shape[spec.channel_axis]
    spatial = (rest[1], rest[2]) if spec.layout == "nchw" else (rest[0], rest[1])
    if batch != 1:
        raise BadInput(f"--preprocess: input '{name}' has batch {batch}; a preprocessed image is one sample (batch 1)")
    if channels != spec.channels:
        raise BadInput(f"--preprocess: {spec.order} {spec.layout} means {spec.channels} channel(s) on axis "
                       f"{spec.channel_axis}, but input '{name}' has shape {list(shape)}")
    if spec.resize is not None and tuple(spec.resize) != spatial:
        raise BadInput(f"--preprocess: resize={spec.resize[0]}x{spec.resize[1]} contradicts input '{name}' "
                       f"of shape {list(shape)} ({spec.layout}: {spatial[0]}x{spatial[1]})")
    return replace(spec, input=name, input_shape=tuple(shape), resize=spatial)


# ------------------------------------------------------------------------- images, reference


def decode_image(path: str | Path, spec: PreprocessSpec) -> np.ndarray:
    """The image at ``path`` decoded with Pillow, converted to RGB (L for gray) and resized to the
    bound spec's size: an HxWxC array of pixel values on the 0..255 scale -- uint8, or float32 for
    a 16-bit grayscale image, whose 0..65535 range is mapped onto 0..255 (Pillow's RGB/L
    conversion would clip it: every value from 256 up became 255).  An undecodable file, an image
    of 32-bit or float pixels, and one over Pillow's decompression-bomb size are one BadInput line."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise MissingExtra("quantize", "decoding calibration images (Pillow)") from None
    if spec.resize is None:
        raise ValueError("bind the spec to the model first")
    try:
        with warnings.catch_warnings():
            # Pillow only warns (two lines on stderr) between its bomb limit and twice it
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                img.load()
                array = _pixels(img, spec, Image)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as err:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise BadInput(f"--calibration {path}: not a decodable image ({text})") from None
    return array[:, :, None] if array.ndim == 2 else array


def _pixels(img, spec: PreprocessSpec, Image) -> np.ndarray:
    height, width = spec.resize
    sixteen_bit = img.mode.startswith("I;16") or (img.mode == "I" and img.format == "PNG")
    if img.mode in ("I", "F") and not sixteen_bit:
        raise ValueError(f"{img.mode} pixels ({'32-bit integers' if img.mode == 'I' else 'floats'}) have no "
                         "fixed range; give 8- or 16-bit images")
    if sixteen_bit:
        img = img.convert("F")
    else:
        img = img.convert("L" if spec.order == "gray" else "RGB")
    if img.size != (width, height):
        img = img.resize((width, height), Image.BILINEAR)
    if not sixteen_bit:
        return np.asarray(img, dtype=np.uint8)
    gray = np.asarray(img, dtype=np.float32) * np.float32(255.0 / 65535.0)
    return gray if spec.order == "gray" else np.repeat(gray[:, :, None], 3, axis=2)


def apply_spec(spec: PreprocessSpec, image: np.ndarray) -> np.ndarray:
    """The numpy reference: an HxWxC image of 0..255 pixel values (uint8, or float32 from a 16-bit
    image; already at the spec's size) -> the model input (float32, batch 1, the spec's layout),
    in the documented order of operations."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != spec.channels:
        raise BadInput(f"preprocess: expected an HxWx{spec.channels} image, got shape {list(image.shape)}")
    lo, hi = spec.value_range
    x = image.astype(np.float32) * np.float32((hi - lo) / 255.0) + np.float32(lo)
    if spec.order == "bgr":
        x = x[:, :, ::-1]
    x = (x - spec.per_channel(spec.mean)) / spec.per_channel(spec.std)
    if spec.layout == "nchw":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x[None], dtype=np.float32)


def undo_spec(spec: PreprocessSpec, tensor: np.ndarray) -> np.ndarray:
    """The inverse of the value part of :func:`apply_spec`: a model input (NCHW/NHWC, batch N) ->
    pixel values on the 0..255 scale, NHWC, in the *model's* channel order (float64)."""
    x = np.asarray(tensor, dtype=np.float64)
    if spec.layout == "nchw":
        x = x.transpose(0, 2, 3, 1)
    mean, std = spec.per_channel(spec.mean).astype(np.float64), spec.per_channel(spec.std).astype(np.float64)
    lo, hi = spec.value_range
    return ((x * std + mean) - lo) * 255.0 / (hi - lo)
