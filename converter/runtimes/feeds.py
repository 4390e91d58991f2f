"""The inputs a verification runs on: seeded random tensors, or the user's calibration data.

Random inputs follow each graph input's shape and dtype; float inputs are drawn uniformly from a
per-input range (default ``[-1, 1)``; images normalized to ``[0, 1]`` want ``input=0:1``), integer
inputs from ``[LOW, HIGH)`` of their range (``--input-range ids=0:30522``: valid token ids) or,
without one, by what their name says (attention masks all ones, position ids 0, 1, 2, ..., token
types 0 or 1, other integers ``[0, 4)``), booleans fairly.

Calibration data is an ``.npz`` file with one array per graph input, named like the input.  The
sample axis is the first: an array with one extra leading axis holds N samples ([N, 1, 3, 224,
224] for a 1x3x224x224 input), and for an input of batch 1 an array of the input's rank holds N
samples along its batch axis ([N, 3, 224, 224]: the layout data loaders hand over).  An array of
exactly the input's shape is one sample; for an input of batch B > 1, [N, ...] with N != B is
ambiguous and refused in one line.  Every input must hold the same N.  This is also the format
replay files are written in.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ..errors import BadInput
from ..frontend import declared_inputs

#: Default uniform range for float inputs.
DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
#: Default half-open range for integer inputs (small: indices and counts are usually small).
DEFAULT_INT_RANGE = (0, 4)

Sample = dict[str, np.ndarray]


@dataclass(frozen=True)
class InputSpec:
    name: str
    #: Each dimension an int, or a str (symbolic) / None (unknown) when not fixed.
    shape: tuple
    dtype: np.dtype

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The graph inputs a caller must feed (initializers listed as inputs are not among them)."""
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        ttype = inp.type.tensor_type
        dims = []
        for d in ttype.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or None)
        specs.append(InputSpec(inp.name, tuple(dims), np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))))
    return specs


def parse_range(flag: str, option: str = "--input-range") -> tuple[str, tuple[float, float]]:
    """``"input=0:1"`` -> ``("input", (0.0, 1.0))``; a bare ``"0:1"`` names every float input (``""``)."""
    return declared_inputs.parse_range(flag, option)


def random_inputs(
    model: onnx.ModelProto,
    seed: int = 0,
    ranges: dict[str, tuple[float, float]] | None = None,
    samples: int = 1,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> list[Sample]:
    """``samples`` seeded input dicts.

    ``ranges[name]`` is what input ``name`` draws (integers from [low, high), floats uniformly);
    ``ranges[""]`` applies to every float input without its own.  Without a range, an integer or
    bool input whose name says *mask* is all ones, one whose name says *position* counts 0, 1, 2,
    ... along its last axis, one whose name says *token_type* or *segment* draws from [0, 2); other
    integers from :data:`DEFAULT_INT_RANGE`.  ``shapes`` fixes dynamic dimensions (``shapes[""]``
    names the first input).
    """
    specs = input_specs(model)
    ranges = dict(ranges or {})
    shapes = dict(shapes or {})
    if "" in shapes and specs:  # a bare shape names the first input
        shapes[specs[0].name] = shapes.pop("")
    known = {s.name for s in specs}
    for name in list(ranges) + list(shapes):
        if name and name not in known:
            raise BadInput(f"no model input named '{name}'; the model's inputs are: {', '.join(sorted(known))}")
    for spec in specs:
        if spec.name in ranges:
            declared_inputs.check_range(spec.name, spec.dtype.name, ranges[spec.name])
    if samples < 1:
        raise BadInput(f"--samples must be at least 1 (got {samples})")
    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    for _ in range(samples):
        sample: Sample = {}
        for spec in specs:
            shape = shapes.get(spec.name, spec.shape)
            if not all(isinstance(d, int) and d > 0 for d in shape):
                example = "x".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in shape)
                raise BadInput(
                    f"input '{spec.name}' has a dynamic shape {list(shape)}; fix it with "
                    f"--input-shape {spec.name}={example} or give data with --inputs data.npz"
                )
            sample[spec.name] = _draw(rng, spec, tuple(shape), ranges)
        out.append(sample)
    return out


def _draw(rng, spec: InputSpec, shape: tuple[int, ...], ranges: dict) -> np.ndarray:
    """One input's random values (see :func:`random_inputs`)."""
    if np.issubdtype(spec.dtype, np.floating):
        lo, hi = ranges.get(spec.name) or ranges.get("") or DEFAULT_FLOAT_RANGE
        return rng.uniform(lo, hi, shape).astype(spec.dtype)
    if spec.dtype != np.bool_ and not np.issubdtype(spec.dtype, np.integer):
        raise BadInput(f"input '{spec.name}' has dtype {spec.dtype}, which random inputs cannot fill; "
                       "give data with --inputs data.npz")
    if spec.name in ranges:
        lo, hi = ranges[spec.name]
        return rng.integers(int(lo), int(hi), shape).astype(spec.dtype)
    role = declared_inputs.integer_role(spec.name)
    if role == "mask":
        return np.ones(shape, spec.dtype)
    if role == "position":
        return np.broadcast_to(np.arange(shape[-1] if shape else 1), shape).astype(spec.dtype)
    if spec.dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(*(declared_inputs.TOKEN_TYPE_RANGE if role == "token_type" else DEFAULT_INT_RANGE), shape).astype(spec.dtype)


def describe_draws(model: onnx.ModelProto, ranges: dict | None = None) -> str:
    """How :func:`random_inputs` fills ``model``'s inputs, in a few words for reports."""
    ranges = dict(ranges or {})
    spans = ", ".join(f"{k} [{lo:g}, {hi:g})" for k, (lo, hi) in sorted(ranges.items()) if k)
    floats = "floats uniform " + (f"[{ranges[''][0]:g}, {ranges[''][1]:g})" if "" in ranges else
                                  "[{:g}, {:g})".format(*DEFAULT_FLOAT_RANGE))
    parts = [floats] + ([spans] if spans else [])
    ints = [s for s in input_specs(model) if not np.issubdtype(s.dtype, np.floating) and s.name not in ranges]
    roles = {declared_inputs.integer_role(s.name) for s in ints}
    if ints:
        parts.append("integers in [{}, {})".format(*DEFAULT_INT_RANGE))
    parts += [{"mask": "masks all ones", "position": "position ids 0, 1, 2, ...",
               "token_type": "token types in [0, 2)"}[r] for r in ("mask", "position", "token_type") if r in roles]
    return ", ".join(parts)


def load_npz(path: str | os.PathLike, model: onnx.ModelProto, flag: str = "--inputs") -> list[Sample]:
    """Read calibration samples for ``model`` from ``path``; every problem is one BadInput line
    starting with ``flag`` (the option that named the file)."""
    path = Path(path)
    return samples_from_arrays(read_npz(path, flag), model, source=f"{flag} {path}")


def read_npz(path: Path, flag: str = "--inputs") -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, never unpickling anything."""
    if not path.is_file():
        raise BadInput(f"{flag} {path}: no such file")
    if not zipfile.is_zipfile(path):
        raise BadInput(f"{flag} {path}: not an .npz file (numpy.savez writes a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise BadInput(f"{flag} {path}: holds pickled object arrays, which edgeconv does not load") from None
        raise BadInput(f"{flag} {path}: unreadable .npz ({str(err).splitlines()[0]})") from None
    except Exception as err:  # zipfile/format errors
        raise BadInput(f"{flag} {path}: unreadable .npz ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None


def _stack_of_samples(arr: np.ndarray, spec: InputSpec, source: str) -> np.ndarray:
    """An array of the input's rank as [samples, *input shape]: one sample when it has the input's
    shape; for a batch-1 input, [N, ...] is N samples (the layout data loaders, TF's
    representative datasets and onnx2tf's ``-cind`` use); for a batch-B input it is ambiguous."""
    batch = spec.shape[0] if spec.shape else None
    fits_rest = all(not isinstance(want, int) or want == have for want, have in zip(spec.shape[1:], arr.shape[1:]))
    if not isinstance(batch, int) or arr.shape[0] == batch or not fits_rest:
        return arr[None]  # one sample (a wrong shape is reported by the caller, naming the axis)
    if batch == 1:
        return arr[:, None]
    shape = [d if isinstance(d, int) else "?" for d in spec.shape]
    raise BadInput(f"{source}: '{spec.name}' has shape {list(arr.shape)} for an input of shape {shape}: with a "
                   f"batch of {batch}, give one sample as {shape} or N samples as {['N', *shape]}")


def samples_from_arrays(arrays: dict[str, np.ndarray], model: onnx.ModelProto, source: str = "inputs",
                        pick=None) -> list[Sample]:
    """Split ``{input name: array}`` into samples, checking names, ranks, shapes and dtypes.
    ``pick``: ``n`` -> the indices of the samples to keep (default: all ``n``)."""
    specs = input_specs(model)
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise BadInput(f"{source}: no array for model input(s) {', '.join(missing)} (arrays: {', '.join(sorted(arrays)) or 'none'})")
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise BadInput(f"{source}: array(s) {', '.join(extra)} match no model input (inputs: {', '.join(names)})")
    counts: dict[str, int] = {}
    stacked: dict[str, np.ndarray] = {}
    for spec in specs:
        arr = np.asarray(arrays[spec.name])
        rank = len(spec.shape)
        if arr.ndim == rank:
            arr = _stack_of_samples(arr, spec, source)
        elif arr.ndim != rank + 1:
            raise BadInput(f"{source}: '{spec.name}' has shape {list(arr.shape)}; the input has rank {rank} "
                           f"(give rank {rank} for one sample or {rank + 1} for N samples)")
        for axis, (want, have) in enumerate(zip(spec.shape, arr.shape[1:])):
            if isinstance(want, int) and want != have:
                raise BadInput(f"{source}: '{spec.name}' sample shape {list(arr.shape[1:])} does not fit the "
                               f"input shape {[d if isinstance(d, int) else '?' for d in spec.shape]} (axis {axis})")
        if arr.size == 0 and arr.shape[0] == 0:
            raise BadInput(f"{source}: '{spec.name}' holds no samples")
        if arr.dtype != spec.dtype:
            if not np.can_cast(arr.dtype, spec.dtype, casting="same_kind"):
                raise BadInput(f"{source}: '{spec.name}' is {arr.dtype}, the input wants {spec.dtype}")
            arr = arr.astype(spec.dtype)
        counts[spec.name] = arr.shape[0]
        stacked[spec.name] = arr
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
        raise BadInput(f"{source}: inputs hold different numbers of samples ({detail})")
    n = next(iter(counts.values()), 1)
    return [{k: np.ascontiguousarray(v[i]) for k, v in stacked.items()} for i in (range(n) if pick is None else pick(n))]
