"""The batch manifest: schema, validation with file:line errors, and expansion into jobs.

```yaml
output: release-out            # optional, relative to this file (``-o`` overrides)
runtimes:                      # optional: real runtimes that judge the target stage (port --runtime)
  tnn: /opt/tnn/bin/tnn_run    #   relative to this file; a model entry may set its own
  mace: /opt/mace/mace_run
defaults:                      # optional, applied to every model
  atol: 1.0e-4
targets:                       # the default targets for every model
  - {to: tflite, hw: [cpu, gpu]}
  - {to: tnn, hw: arm}
models:
  - path: det.onnx             # required, relative to this file
    name: detector             # optional (default: file stem)
    input_shapes: {input: [1, 3, 32, 32]}   # or with a type: {input_ids: "1x128:int64"} (port -s)
    input_ranges: {input_ids: "0:30522"}  # optional: what random inputs draw (port --input-range)
    inputs: verify.npz         # optional: verification inputs (like port --inputs)
    quantize: int8             # optional: int8, uint8, fp16, int8-weights, auto (port --quantize)
    calibration: calib.npz     # optional: calibration data, a file or a directory (port --calibration);
                               # an .npz also serves as verification inputs when 'inputs' is not given
    calibration_method: minmax # optional: minmax, percentile, entropy, mse
    per_tensor: false          # optional: one weight scale per tensor
    bias_correction: true      # optional: false keeps the biases uncorrected (port --no-bias-correction)
    preprocess: "rgb,range=0-1"  # optional: inline spec, or a YAML file relative to this file
    atol: 1.0e-4               # optional; also rtol, tolerances (a profile YAML)
    trust_pickle: false
    timeout: 600               # optional: seconds user model code / inference may run (port --timeout)
    max_memory: 8G             # optional: port --max-memory
    targets: [...]             # optional: replaces the default targets for this model
```
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..matrix.loader import line_of, read_yaml_with_lines
from ..port.request import FLAGS

#: A model entry: where the model is and which targets, plus the port's own options by their flat
#: names (converter/port/request.py), except those that are the batch's, not a model's.
_MODEL_KEYS = {"path", "name", "targets"} | (set(FLAGS) - {"matrix", "matrix_overlays", "verify", "seed", "retrain_hook",
                                                           "command_line", "example_inputs"})
_TOP_KEYS = {"output", "defaults", "targets", "models", "runtimes"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Job:
    model_name: str
    model_path: Path
    target: str
    hw: str
    #: The model's manifest entry as given (after defaults): part of the cache key.
    entry: dict[str, Any] = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.model_name}--{self.target}--{self.hw}"

    def entry_json(self) -> str:
        return json.dumps({"entry": self.entry, "target": self.target, "hw": self.hw}, sort_keys=True, default=str)


@dataclass
class Manifest:
    path: Path
    output: Path
    jobs: list[Job]


class ManifestError(BadInput):
    pass


def load_manifest(path: str | Path) -> Manifest:
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: no such manifest file")
    try:
        data, lines = read_yaml_with_lines(path)
    except BadInput as err:  # re-label: the reader speaks of a "matrix file"
        raise ManifestError(str(err).replace("matrix file", "manifest")) from None

    def fail(at: tuple, message: str):
        raise ManifestError(f"{line_of(lines, at).replace('op_support_matrix.yaml', path.name)}: "
                            f"{'.'.join(str(p) for p in at) or 'manifest'}: {message}")

    defaults = _check_top_level(data, fail)
    base = path.parent
    reading = _Reading(base, defaults, data.get("targets"),
                       _check_runtimes(data.get("runtimes"), ("runtimes",), base, fail), fail)
    jobs: list[Job] = []
    for i, raw in enumerate(data["models"]):
        jobs += _model_jobs(raw, ("models", i), reading)
    output = data.get("output", "batch-out")
    if not isinstance(output, str):
        fail(("output",), "must be a directory path")
    _validate_targets(jobs, fail)
    return Manifest(path, (base / output).resolve(), jobs)


def _check_top_level(data, fail) -> dict:
    """The manifest's own keys, and a non-empty list of models; its defaults."""
    if not isinstance(data, dict):
        fail((), "must be a mapping with 'models' and 'targets'")
    for key in data:
        if key not in _TOP_KEYS:
            fail((key,), f"unknown key; allowed: {', '.join(sorted(_TOP_KEYS))}")
    if not isinstance(data.get("models"), list) or not data["models"]:
        fail(("models",), "a non-empty list of models is required")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        fail(("defaults",), "must be a mapping")
    return defaults


@dataclass
class _Reading:
    """What every model entry is read against: the manifest's folder, its defaults, default
    targets and runtimes; ``fail(at, message)`` raises the error for a place in the file."""

    base: Path
    defaults: dict
    targets: Any
    runtimes: dict[str, str]
    fail: Callable[[tuple, str], None]
    #: The model names given so far (a name must be unique).
    seen: set[str] = field(default_factory=set)


def _model_jobs(raw, at: tuple, reading: _Reading) -> list[Job]:
    """The jobs of one model entry (after defaults), its keys checked and its paths resolved
    against the manifest."""
    fail = reading.fail
    if not isinstance(raw, dict):
        fail(at, "each model must be a mapping with at least 'path'")
    entry = {**reading.defaults, **raw}
    for key in raw:
        if key not in _MODEL_KEYS:
            fail(at + (key,), f"unknown key; allowed: {', '.join(sorted(_MODEL_KEYS))}")
    model_path, name = _model_file(entry, at, reading)
    _check_model_options(entry, at, reading.base, fail)
    own = _check_runtimes(raw.get("runtimes"), at + ("runtimes",), reading.base, fail)
    if reading.runtimes or own:
        entry["runtimes"] = {**reading.runtimes, **own}
    targets_at = at + ("targets",) if "targets" in raw else ("targets",)
    targets = raw.get("targets", reading.targets)
    if not isinstance(targets, list) or not targets:
        fail(targets_at, "a non-empty list of {to: framework, hw: hardware or [hardware...]} is required")
    entry = {k: v for k, v in entry.items() if k != "targets"}
    jobs = []
    for j, t in enumerate(targets):
        t_at = targets_at + (j,)
        if not isinstance(t, dict) or "to" not in t or "hw" not in t:
            fail(t_at, "each target needs 'to' and 'hw'")
        hws = t["hw"] if isinstance(t["hw"], list) else [t["hw"]]
        for hw in hws:
            if not isinstance(hw, str):
                fail(t_at + ("hw",), "hardware names are strings")
            jobs.append(Job(name, model_path, str(t["to"]), hw, entry))
    return jobs


def _model_file(entry: dict, at: tuple, reading: _Reading) -> tuple[Path, str]:
    """The model's file (which must exist) and its name (unique in the manifest)."""
    fail = reading.fail
    if not isinstance(entry.get("path"), str):
        fail(at + ("path",), "required: the model file, relative to the manifest")
    model_path = (reading.base / entry["path"]).resolve()
    if not model_path.exists():
        fail(at + ("path",), f"{entry['path']}: no such file")
    _regular_unless_dir(model_path, at + ("path",), "model", fail)
    name = entry.get("name") or model_path.stem
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        fail(at + ("name",), "must be letters, digits, '_', '-' or '.'")
    if name in reading.seen:
        fail(at + ("name",), f"duplicate model name '{name}' (set 'name' to tell them apart)")
    reading.seen.add(name)
    return model_path, name


def _check_model_options(entry: dict, at: tuple, base: Path, fail) -> None:
    """A model's port options, as ``port``'s flags check them (paths resolved against the
    manifest, ``max_memory`` parsed)."""
    _check_inputs(entry, at, fail)
    for key in ("atol", "rtol", "timeout"):
        if key in entry and (not isinstance(entry[key], (int, float)) or entry[key] < 0):
            fail(at + (key,), "must be a non-negative number")
    if "max_memory" in entry:
        from ..ir.memory import parse_size

        try:
            entry["max_memory"] = parse_size(str(entry["max_memory"]))
        except BadInput as err:
            fail(at + ("max_memory",), str(err).replace("--max-memory ", ""))
    for key in ("inputs", "tolerances"):
        if key in entry:
            if not isinstance(entry[key], str) or not (base / entry[key]).is_file():
                fail(at + (key,), f"{entry[key]}: no such file")
            entry[key] = str((base / entry[key]).resolve())
    _check_quantization(entry, base, at, fail)


def _check_quantization(entry: dict, base: Path, at: tuple, fail) -> None:
    """The quantization keys, as ``port``'s flags check them (paths resolved against the manifest)."""
    from ..quantize.modes import MODES
    from ..quantize.ranges import METHODS

    if "calibration" in entry:
        if not isinstance(entry["calibration"], str) or not (base / entry["calibration"]).exists():
            fail(at + ("calibration",), f"{entry['calibration']}: no such file or directory")
        entry["calibration"] = str((base / entry["calibration"]).resolve())
        _regular_unless_dir(Path(entry["calibration"]), at + ("calibration",), "calibration file", fail)
    if "quantize" in entry and entry["quantize"] not in MODES:
        fail(at + ("quantize",), f"one of {', '.join(MODES)}")
    if "calibration_method" in entry and entry["calibration_method"] not in METHODS:
        fail(at + ("calibration_method",), f"one of {', '.join(METHODS)}")
    for key in ("per_tensor", "bias_correction"):
        if key in entry and not isinstance(entry[key], bool):
            fail(at + (key,), "true or false")
    if "preprocess" in entry:
        spec = entry["preprocess"]
        if not isinstance(spec, str):
            fail(at + ("preprocess",), "an inline spec (e.g. rgb,range=0-1) or a YAML file")
        if spec.lower().endswith((".yaml", ".yml")):
            if not (base / spec).is_file():
                fail(at + ("preprocess",), f"{spec}: no such file")
            entry["preprocess"] = spec = str((base / spec).resolve())
        from ..quantize.preprocess import parse_spec

        try:
            parse_spec(spec)
        except BadInput as err:
            fail(at + ("preprocess",), str(err).removeprefix("--preprocess").lstrip(": "))


def _regular_unless_dir(path: Path, at: tuple, what: str, fail) -> None:
    """A FIFO or device named as a model or data file would block the job's hashing forever."""
    from ..infra.fsutil import regular_file

    if not path.is_dir():
        try:
            regular_file(path, what)
        except BadInput as err:
            fail(at, str(err).replace(f"{path}: ", "", 1))


def _check_runtimes(value, at: tuple, base: Path, fail) -> dict[str, str]:
    """``runtimes: {tnn: PATH, mace: PATH}`` with paths resolved against the manifest."""
    from ..targets.oracles import pluggable

    ENV = pluggable()

    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(at, f"a mapping of framework ({', '.join(ENV)}) to a runtime path")
    out = {}
    for name, path in value.items():
        if name not in ENV:
            fail(at + (name,), f"no pluggable runtime for '{name}'; choose one of: {', '.join(ENV)}")
        if not isinstance(path, str) or not (base / path).exists():
            fail(at + (name,), f"{path}: no such file or directory")
        out[name] = str((base / path).resolve())
    return out


def _check_inputs(entry: dict, at: tuple, fail) -> None:
    """``input_shapes`` (a list of positive integers or ``"1x128:int64"`` per input) and
    ``input_ranges`` (``"0:30522"`` or ``[0, 30522]`` per input), as ``-s`` and ``--input-range``."""
    from ..frontend.declared_inputs import check_range, ranges_from_value, shapes_from_value

    shapes, ranges = entry.get("input_shapes"), entry.get("input_ranges")
    dtypes: dict = {}
    for key, value in (("input_shapes", shapes), ("input_ranges", ranges)):
        if value is None:
            continue
        if not isinstance(value, dict):
            fail(at + (key,), "a mapping of input name to " + (
                "a list of positive integers or a string like '1x128:int64'" if key == "input_shapes" else
                "'LOW:HIGH' or [LOW, HIGH]"))
        for name, item in value.items():
            try:
                if key == "input_shapes":
                    dtypes.update(shapes_from_value({name: item}, key)[1])
                else:
                    span = ranges_from_value({name: item}, key)[name]
                    if name in dtypes:
                        check_range(name, dtypes[name], span, key)
            except BadInput as err:
                fail(at + (key, name), str(err).split(": ", 1)[-1])


def _validate_targets(jobs: list[Job], fail) -> None:
    """Resolve hardware words now, so a typo fails the manifest rather than one job later."""
    from .. import targets as target_registry
    from ..matrix import load_matrix

    matrix = load_matrix()
    resolved = []
    for job in jobs:
        if job.target not in target_registry.names():
            fail(("targets",), f"unknown framework '{job.target}'; choose one of: {', '.join(target_registry.names())}")
        try:  # a class word (hw: npu) names every hardware of that class, one job each
            hardware = matrix.resolve_hw_words(job.target, job.hw)
        except BadInput as err:
            fail(("targets",), str(err))
        resolved += [Job(job.model_name, job.model_path, job.target, hw, job.entry) for hw in hardware
                     if not any(j.model_path == job.model_path and j.target == job.target and j.hw == hw
                                for j in resolved)]
    jobs[:] = resolved
