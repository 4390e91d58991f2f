"""Calibration data: ``--calibration SRC`` -> a list of feed dicts, checked against the model.

SRC is one of

* an ``.npz`` file with one array per model input, named like the input; the first axis is the
  sample axis: [N, 3, 224, 224] or [N, 1, 3, 224, 224] are N samples for a 1x3x224x224 input, an
  array of exactly the input's shape is one (:func:`converter.runtimes.feeds.samples_from_arrays`);
* a directory of ``.npz`` files (each as above) and/or ``.npy`` files (one-input models only:
  each file one sample, or N samples along an extra leading axis), read in file-name order;
* a directory of images (png, jpg, bmp, gif, webp, tiff, ppm/pgm) together with
  ``--preprocess SPEC`` (decoded with Pillow, see :mod:`.preprocess`).

Every problem is one :class:`~converter.errors.BadInput` line: names or shapes that do not match
the model, NaN/Inf values, an empty directory, an image that does not decode, a spec that
contradicts the model, or a set larger than ``max_bytes`` (checked from the file headers before
anything is loaded: an .npy header declaring more than its file holds is refused).  Fewer than
:data:`MIN_SAMPLES` samples is a warning, not an error; more than :data:`MAX_SAMPLES` are
calibrated on a random, seeded subset of that many, which the report and a warning name.
Reading the set and the calibration runs are each bounded by ``--timeout`` as a whole.
Nothing is ever unpickled (``allow_pickle=False``).
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ..errors import BadInput
from ..infra.fsutil import regular_file
from ..runtimes.feeds import input_specs, read_npz, samples_from_arrays
from .preprocess import IMAGE_SUFFIXES, PreprocessSpec, apply_spec, bind, decode_image

FLAG = "--calibration"
MIN_SAMPLES = 16
#: Calibrate on at most this many samples (a random, seeded subset of a bigger set): ranges from
#: a few hundred samples rarely move with more, and the time grows with every one.
MAX_SAMPLES = 512
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
    #: Samples in the source; ``samples`` is a random subset when it held more than MAX_SAMPLES.
    total: int = 0


def load_calibration(src: str | Path, model: onnx.ModelProto, spec: PreprocessSpec | None = None,
                     max_bytes: int = DEFAULT_MAX_BYTES, max_samples: int = MAX_SAMPLES,
                     seed: int = 0) -> CalibrationSet:
    """Read and validate ``src`` for ``model`` (the float model that will be quantized).  A set of
    more than ``max_samples`` samples is calibrated on a random subset of that many (``seed``);
    reading it is bounded by ``--timeout`` as a whole (:class:`converter.infra.limits.Deadline`)."""
    from ..infra.limits import Deadline

    path = Path(src)
    if not path.exists():
        raise BadInput(f"{FLAG} {path}: no such file or directory")
    deadline = Deadline(f"{FLAG} {path}: reading the calibration set")
    choose = _Subset(max_samples, seed)
    if not path.is_dir():
        regular_file(path, "calibration file")
        if path.suffix.lower() != ".npz":
            raise BadInput(f"{FLAG} {path}: expected an .npz file or a directory (of .npy/.npz files or images)")
        _check_size([path], [], 0, max_bytes, path)
        # the subset is taken before the arrays are split into samples (a million of them, say)
        samples = samples_from_arrays(read_npz(path, FLAG), model, source=f"{FLAG} {path}", pick=choose)
        total = choose.seen
    else:
        samples, total = _load_directory(path, model, spec, max_bytes, choose, deadline)
    _check_finite(samples, path)
    nbytes = sum(a.nbytes for s in samples for a in s.values())
    warnings = []
    if len(samples) < MIN_SAMPLES:
        warnings.append(f"{FLAG} {path}: only {len(samples)} sample{'s' if len(samples) != 1 else ''}; ranges "
                        f"calibrated on fewer than {MIN_SAMPLES} rarely cover the data the model will see")
    used = f"{len(samples)} sample{'s' if len(samples) != 1 else ''}"
    if total > len(samples):
        used = f"a random subset of {len(samples)} of its {total} samples, seed {seed}"
        warnings.append(f"{FLAG} {path}: {total} samples; calibrating on a random subset of {len(samples)} "
                        f"(seed {seed}; at most {max_samples} are used)")
    return CalibrationSet(samples, f"{path} ({used})", warnings, nbytes, total)


class _Subset:
    """``subset(n)`` -> the indices of the samples to use: all, or a sorted random subset of
    ``max_samples`` (seeded); ``seen`` is the ``n`` it was last asked about."""

    def __init__(self, max_samples: int, seed: int):
        self.max_samples, self.seed, self.seen = max_samples, seed, 0

    def __call__(self, n: int) -> list[int]:
        self.seen = n
        if n <= self.max_samples:
            return list(range(n))
        return sorted(int(i) for i in np.random.default_rng(self.seed).choice(n, self.max_samples, replace=False))


def _chosen(samples: list, choose: _Subset) -> tuple[list, int]:
    return [samples[i] for i in choose(len(samples))], len(samples)


def _load_directory(path: Path, model: onnx.ModelProto, spec: PreprocessSpec | None, max_bytes: int, choose,
                    deadline) -> tuple[list[Sample], int]:
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    arrays = [p for p in files if p.suffix.lower() in (".npy", ".npz")]
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    if not arrays and not images:
        raise BadInput(f"{FLAG} {path}: no .npy, .npz or image files in the directory")
    if arrays and images:
        raise BadInput(f"{FLAG} {path}: mixes arrays ({arrays[0].name}) and images ({images[0].name}); use one kind")
    if images:
        picked = [images[i] for i in choose(len(images))]  # decode only the images used
        return _load_images(path, picked, model, spec, max_bytes, deadline), len(images)
    _check_size(arrays, [], 0, max_bytes, path)
    specs = input_specs(model)
    samples: list[Sample] = []
    for file in arrays:
        deadline.check()
        if file.suffix.lower() == ".npz":
            arrays_of_file = read_npz(file, FLAG)
        else:
            if len(specs) != 1:
                raise BadInput(f"{FLAG} {file}: an .npy file cannot say which input it feeds and the model has "
                               f"{len(specs)} ({', '.join(s.name for s in specs)}); use .npz files keyed by input name")
            arrays_of_file = {specs[0].name: _read_npy(file)}
        samples += samples_from_arrays(arrays_of_file, model, source=f"{FLAG} {file}")
    return _chosen(samples, choose)


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """An .npy file's declared (shape, dtype) and the bytes that follow its header, read from the
    header alone; BadInput for a header that is not numpy's or declares more data than the file has."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in reader:
                raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
            shape, _, dtype = reader[version](f)
            payload = os.fstat(f.fileno()).st_size - f.tell()
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as err:
        raise BadInput(f"{FLAG} {path}: unreadable .npy ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if dtype.hasobject:
        raise BadInput(f"{FLAG} {path}: holds pickled object arrays, which edgeconv does not load")
    declared = math.prod(int(d) for d in shape) * dtype.itemsize
    if declared > payload:
        raise BadInput(f"{FLAG} {path}: its header declares shape {list(shape)} ({declared / 2**30:.3g} GiB of "
                       f"{dtype}), but the file holds {payload} bytes of data")
    return tuple(shape), dtype, declared


def _read_npy(path: Path) -> np.ndarray:
    _npy_header(path)  # before numpy allocates what the header declares
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise BadInput(f"{FLAG} {path}: holds pickled object arrays, which edgeconv does not load") from None
        raise BadInput(f"{FLAG} {path}: unreadable .npy ({str(err).splitlines()[0]})") from None
    except (OSError, EOFError) as err:
        raise BadInput(f"{FLAG} {path}: unreadable .npy ({type(err).__name__})") from None


def _load_images(path: Path, images: list[Path], model: onnx.ModelProto, spec: PreprocessSpec | None,
                 max_bytes: int, deadline) -> list[Sample]:
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
    samples = []
    for image in images:
        deadline.check()
        samples.append({bound.input: apply_spec(bound, decode_image(image, bound)).astype(want)})
    return samples


def _array_bytes(path: Path) -> int:
    """Bytes the arrays in ``path`` occupy once loaded, read from the headers only."""
    if path.suffix.lower() == ".npz":
        try:
            with zipfile.ZipFile(path) as archive:
                return sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, OSError):
            return 0  # read_npz says what is wrong with it
    return _npy_header(path)[2]


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
