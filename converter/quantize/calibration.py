"""Calibration data: ``--calibration SRC`` -> a list of feed dicts, checked against the model.

SRC is one of

* an ``.npz`` file with one array per model input, named like the input (an array of the input's
  rank is one sample; one extra leading axis holds N samples);
* a directory of ``.npz`` files (each as above) and/or ``.npy`` files (one-input models only:
  each file one sample, or N samples along an extra leading axis), read in file-name order;
* a directory of images (png, jpg, bmp, gif, webp, tiff, ppm/pgm) together with
  ``--preprocess SPEC`` (decoded with Pillow, see :mod:`.preprocess`).

Every problem is one :class:`~converter.errors.BadInput` line: names or shapes that do not match
the model, NaN/Inf values, an empty directory, an image that does not decode, a spec that
contradicts the model, or a set larger than ``max_bytes`` (checked from the file headers before
anything is loaded).  Fewer than :data:`MIN_SAMPLES` samples is a warning, not an error.
Nothing is ever unpickled (``allow_pickle=False``).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ..errors import BadInput
from ..runtimes.feeds import input_specs, read_npz, samples_from_arrays
from .preprocess import IMAGE_SUFFIXES, PreprocessSpec, apply_spec, bind, decode_image

FLAG = "--calibration"
MIN_SAMPLES = 16
#: Refuse calibration sets bigger than this (bytes of arrays once loaded).
DEFAULT_MAX_BYTES = 2 << 30

Sample = dict[str, np.ndarray]


@dataclass
class CalibrationSet:
    samples: list[Sample]
    #: "calib.npz (100 samples)", for the report.
    source: str
    warnings: list[str] = field(default_factory=list)
    nbytes: int = 0


def load_calibration(src: str | Path, model: onnx.ModelProto, spec: PreprocessSpec | None = None,
                     max_bytes: int = DEFAULT_MAX_BYTES) -> CalibrationSet:
    """Read and validate ``src`` for ``model`` (the float model that will be quantized)."""
    path = Path(src)
    if not path.exists():
        raise BadInput(f"{FLAG} {path}: no such file or directory")
    if path.is_file():
        if path.suffix.lower() != ".npz":
            raise BadInput(f"{FLAG} {path}: expected an .npz file or a directory (of .npy/.npz files or images)")
        _check_size([path], [], 0, max_bytes, path)
        samples = samples_from_arrays(read_npz(path, FLAG), model, source=f"{FLAG} {path}")
    else:
        samples = _load_directory(path, model, spec, max_bytes)
    _check_finite(samples, path)
    nbytes = sum(a.nbytes for s in samples for a in s.values())
    warnings = []
    if len(samples) < MIN_SAMPLES:
        warnings.append(f"{FLAG} {path}: only {len(samples)} sample{'s' if len(samples) != 1 else ''}; ranges "
                        f"calibrated on fewer than {MIN_SAMPLES} rarely cover the data the model will see")
    return CalibrationSet(samples, f"{path} ({len(samples)} sample{'s' if len(samples) != 1 else ''})", warnings, nbytes)


def _load_directory(path: Path, model: onnx.ModelProto, spec: PreprocessSpec | None, max_bytes: int) -> list[Sample]:
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    arrays = [p for p in files if p.suffix.lower() in (".npy", ".npz")]
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    if not arrays and not images:
        raise BadInput(f"{FLAG} {path}: no .npy, .npz or image files in the directory")
    if arrays and images:
        raise BadInput(f"{FLAG} {path}: mixes arrays ({arrays[0].name}) and images ({images[0].name}); use one kind")
    if images:
        return _load_images(path, images, model, spec, max_bytes)
    _check_size(arrays, [], 0, max_bytes, path)
    specs = input_specs(model)
    samples: list[Sample] = []
    for file in arrays:
        if file.suffix.lower() == ".npz":
            arrays_of_file = read_npz(file, FLAG)
        else:
            if len(specs) != 1:
                raise BadInput(f"{FLAG} {file}: an .npy file cannot say which input it feeds and the model has "
                               f"{len(specs)} ({', '.join(s.name for s in specs)}); use .npz files keyed by input name")
            arrays_of_file = {specs[0].name: _read_npy(file)}
        samples += samples_from_arrays(arrays_of_file, model, source=f"{FLAG} {file}")
    return samples


def _read_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise BadInput(f"{FLAG} {path}: holds pickled object arrays, which edgeconv does not load") from None
        raise BadInput(f"{FLAG} {path}: unreadable .npy ({str(err).splitlines()[0]})") from None
    except (OSError, EOFError) as err:
        raise BadInput(f"{FLAG} {path}: unreadable .npy ({type(err).__name__})") from None


def _load_images(path: Path, images: list[Path], model: onnx.ModelProto, spec: PreprocessSpec | None,
                 max_bytes: int) -> list[Sample]:
    if spec is None:
        raise BadInput(f"{FLAG} {path}: a directory of images needs --preprocess SPEC (e.g. "
                       "rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225) to become model inputs")
    bound = spec if spec.input_shape is not None else bind(spec, model)
    specs = input_specs(model)
    if len(specs) != 1:
        raise BadInput(f"{FLAG} {path}: images feed one input, but the model has {len(specs)} "
                       f"({', '.join(s.name for s in specs)}); give .npz files keyed by input name")
    _check_size([], images, int(np.prod(bound.input_shape)) * 4, max_bytes, path)
    want = input_specs(model)[0].dtype
    return [{bound.input: apply_spec(bound, decode_image(image, bound)).astype(want)} for image in images]


def _array_bytes(path: Path) -> int:
    """Bytes the arrays in ``path`` occupy once loaded, read from the headers only."""
    if path.suffix.lower() == ".npz":
        try:
            with zipfile.ZipFile(path) as archive:
                return sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, OSError):
            return 0  # read_npz says what is wrong with it
    return path.stat().st_size


def _check_size(arrays: list[Path], images: list[Path], bytes_per_image: int, max_bytes: int, where: Path) -> None:
    total = sum(_array_bytes(p) for p in arrays) + len(images) * bytes_per_image
    if total > max_bytes:
        raise BadInput(f"{FLAG} {where}: the calibration set needs {total / 2**30:.2f} GiB in memory, over the "
                       f"{max_bytes / 2**30:.2f} GiB limit; use fewer samples (a few hundred are plenty)")


def _check_finite(samples: list[Sample], where: Path) -> None:
    for k, sample in enumerate(samples):
        for name, value in sample.items():
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                raise BadInput(f"{FLAG} {where}: sample {k} of input '{name}' holds NaN or Inf values")
