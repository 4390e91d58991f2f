"""Verification as the commands use it: two ONNX files (``edgeconv verify``) or the stages of a
port (``edgeconv port``), with inputs chosen, reports and replay files written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Callable

import numpy as np
import onnx

from ..infra.fsutil import atomic_write_text
from ..ir.graph import provenance_of
from ..runtimes.feeds import describe_draws, load_npz, random_inputs
from .replay import write_replay
from .report import standalone_html, to_json
from ..runtimes.base import Runner
from ..runtimes.onnxruntime import onnx_runner
from ..targets.base import supports_intermediates
from .stages import Stage, Tolerances, VerifyReport, compose, target_runner, verify_stages
from .target_layers import TargetLocalizer

JSON_FILE = "verify.json"
HTML_FILE = "verify.html"


def choose_inputs(
    model: onnx.ModelProto,
    inputs_npz: str | os.PathLike | None = None,
    seed: int = 0,
    ranges: dict[str, tuple[float, float]] | None = None,
    samples: int = 1,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> tuple[list[dict[str, np.ndarray]], str]:
    """The samples to verify on and a one-line description of where they came from."""
    if inputs_npz is not None:
        data = load_npz(inputs_npz, model)
        return data, f"calibration data {inputs_npz} ({len(data)} sample{'s' if len(data) != 1 else ''})"
    data = random_inputs(model, seed=seed, ranges=ranges, samples=samples, shapes=shapes)
    return data, (f"seeded random inputs (seed {seed}, {samples} sample{'s' if samples != 1 else ''}, "
                  f"{describe_draws(model, ranges)})")


def _shared_tensors(reference: onnx.ModelProto, candidate: onnx.ModelProto) -> int:
    prov = provenance_of(candidate)
    ref = {o for n in reference.graph.node for o in n.output}
    return sum(prov.original_tensor(o) in ref for n in candidate.graph.node for o in n.output)


def localization_reference(original: onnx.ModelProto, converted: onnx.ModelProto) -> onnx.ModelProto:
    """The graph whose tensor names ``converted``'s names and provenance refer to.

    A port's legalized model names its tensors after the *normalized* original (normalization
    gives stable structural names), so when the original file shares fewer tensors with the
    converted one than its normalized form does, the normalized form is the reference.
    """
    shared = _shared_tensors(original, converted)
    if shared >= sum(len(n.output) for n in converted.graph.node):
        return original
    try:
        from ..frontend.normalize import normalize

        normalized = normalize(original)
    except Exception:  # normalization is only a better guess here; keep the original
        return original
    return normalized if _shared_tensors(normalized, converted) > shared else original


def write_outputs(report: VerifyReport, out_dir: str | os.PathLike) -> list[Path]:
    """``verify.json`` and ``verify.html`` (with the per-layer charts of failing stages)."""
    out_dir = Path(out_dir)
    return [
        atomic_write_text(out_dir / JSON_FILE, json.dumps(to_json(report), indent=2, sort_keys=True, allow_nan=False) + "\n"),
        atomic_write_text(out_dir / HTML_FILE, standalone_html(report)),
    ]


def verify_files(
    original_path: str | os.PathLike,
    converted_path: str | os.PathLike,
    tolerances: Tolerances | None = None,
    inputs_npz: str | os.PathLike | None = None,
    seed: int = 0,
    ranges: dict[str, tuple[float, float]] | None = None,
    samples: int = 1,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> VerifyReport:
    """Compare the ONNX file ``converted_path`` with ``original_path`` (localizing on failure)."""
    from ..errors import BadInput
    from ..frontend.load import load_onnx

    for path in (original_path, converted_path):
        if not Path(path).is_file():
            raise BadInput(f"{path}: no such file")
    original = load_onnx(Path(original_path))
    converted = load_onnx(Path(converted_path))
    data, source = choose_inputs(original, inputs_npz, seed, ranges, samples, shapes)

    stage = Stage("converted", onnx_runner(converted), model=converted,
                  reference=lambda: localization_reference(original, converted))
    return verify_stages(original, [stage], data, tolerances, input_source=source)


#: Exported files ``edgeconv verify`` accepts as CONVERTED (with the port's report.json beside them).
TARGET_FILES = (".tnnproto", ".pb", ".tflite", ".mlpackage")


def target_artifact(converted_path: str | os.PathLike):
    """(target, Artifact) for an exported file inside a port's output directory, from the
    ``report.json`` port wrote beside it (framework, hardware and the interface map)."""
    from ..errors import BadInput
    from ..targets import get
    from ..targets.base import Artifact

    path = Path(converted_path)
    report_path = path.parent / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        artifact = report["artifact"]
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput(f"{path}: an exported file is verified from its port directory, but "
                       f"{report_path} is missing or has no 'artifact' (rerun edgeconv port)") from None
    files = [path.parent / f for f in artifact.get("files", [])]
    listed = [f.resolve() for f in files]
    # a file the report lists, or a package directory holding some (a CoreML .mlpackage)
    if path.resolve() not in listed and not any(path.resolve() in f.parents for f in listed):
        raise BadInput(f"{path}: not one of the files {report_path} lists")
    # the named file first (a TNN artifact is [.tnnproto, .tnnmodel]), the rest as written
    files = [path] + [f for f in files if f.resolve() != path.resolve()]
    target = get(report["target"])
    return target, Artifact(target=report["target"], hw=report["hw"], files=files, out_dir=path.parent,
                            meta=artifact.get("meta") or {}, runtime=artifact.get("runtime", ""))


def verify_target_file(
    original_path: str | os.PathLike,
    converted_path: str | os.PathLike,
    tolerances: Tolerances | None = None,
    inputs_npz: str | os.PathLike | None = None,
    seed: int = 0,
    runtimes: dict[str, str] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> VerifyReport:
    """Compare an exported file (run by its framework's real runtime when one is chosen, else by
    the target's own executor) with the ONNX ``original_path``: the target stage of a port, alone.
    ``ranges``: what random inputs draw (:func:`~converter.runtimes.feeds.random_inputs`)."""
    from ..errors import BadInput
    from ..frontend.load import load_onnx
    from ..targets.oracles import bind, oracle_of, resolve

    if not Path(original_path).is_file():
        raise BadInput(f"{original_path}: no such file")
    if not Path(converted_path).exists():
        raise BadInput(f"{converted_path}: no such file")
    original = load_onnx(Path(original_path))
    target, artifact = target_artifact(converted_path)
    target = bind(target, resolve(target.name, runtimes, artifact.hw))
    data, source = choose_inputs(original, inputs_npz, seed, ranges)
    localizer = TargetLocalizer(target, artifact, original) if supports_intermediates(target) else None
    stage = Stage(f"target:{target.name}", target_runner(target, artifact), localizer=localizer,
                  oracle=oracle_of(target, artifact))
    return verify_stages(original, [stage], data, tolerances, input_source=source)


def port_stages(
    original: onnx.ModelProto,
    normalized: onnx.ModelProto,
    legalized: onnx.ModelProto | None = None,
    postprocess: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    target=None,
    artifact=None,
    target_tolerances: Tolerances | None = None,
    normalized_runner: Runner | None = None,
    legalized_runner: Runner | None = None,
) -> list[Stage]:
    """The stages of a port, each compared with the original:

    * ``normalized`` — the canonical ONNX (localized against the original),
    * ``legalized`` — the rewritten ONNX, or the cut model followed by ``postprocess``
      (localized against the normalized model, whose tensor names the rewrites' provenance uses),
    * ``target:<name>`` — the exported files on the target's runtime (+ ``postprocess``): a real
      runtime when ``target`` is bound to one (:func:`converter.runtimes.bind`), else the
      target's own executor; skipped when the target has no runtime here, ``unverified`` when a
      built-in reader cannot run the file; localized inside the file against the legalized
      model when the target implements ``intermediates``.
    """
    stages = [Stage("normalized", normalized_runner or onnx_runner(normalized), model=normalized, reference=original)]
    if legalized is not None:
        run = legalized_runner or onnx_runner(legalized)
        stages.append(Stage("legalized", compose(run, postprocess) if postprocess else run,
                            model=legalized, reference=normalized))
    if target is not None and artifact is not None:
        from ..targets.oracles import oracle_of

        run = target_runner(target, artifact)
        localizer = None
        if legalized is not None and supports_intermediates(target):
            # The file is compared with what was exported: the legalized (cut) model.
            localizer = TargetLocalizer(target, artifact, legalized)
        stages.append(Stage(f"target:{target.name}", compose(run, postprocess) if postprocess else run,
                            tolerances=target_tolerances, localizer=localizer,
                            oracle=oracle_of(target, artifact)))
    return stages


def verify_port(
    original: onnx.ModelProto,
    normalized: onnx.ModelProto,
    legalized: onnx.ModelProto | None = None,
    *,
    postprocess: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    target=None,
    artifact=None,
    inputs: list[dict[str, np.ndarray]] | None = None,
    seed: int = 0,
    tolerances: Tolerances | None = None,
    out_dir: str | os.PathLike | None = None,
    replay_files: tuple[str | os.PathLike, str | os.PathLike] | None = None,
    target_tolerances: Tolerances | None = None,
    shown_dir: str | os.PathLike | None = None,
    target_replay: tuple[str | os.PathLike, str | os.PathLike] | None = None,
    runtimes: dict[str, str] | None = None,
    tolerances_path: str | os.PathLike | None = None,
    reference_runners: tuple[Runner, Runner] | None = None,
    legalized_runner: Runner | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> VerifyReport:
    """What ``edgeconv port`` runs last.  With ``out_dir`` it writes verify.json/verify.html and,
    on failure, the replay files; ``replay_files`` = (original .onnx, converted .onnx) paths the
    reproduce command should name (e.g. the normalized and legalized models port wrote), and
    ``shown_dir`` where ``out_dir`` will be once the port's temporary directory is in place.
    When the target stage is the one that fails, ``target_replay`` = (reference .onnx, exported
    file) is what the reproduce command compares instead (``edgeconv verify`` runs an exported
    file, with ``runtimes`` as its ``--runtime`` flags).  ``reference_runners`` = (original,
    normalized) runners shared by the ports of one model to several targets (``edgeconv port --to
    all``), which compute each output once; ``legalized_runner`` runs the legalized model (one
    started early, or the normalized runner when legalizing changed nothing); ``ranges``: what
    random inputs draw (:func:`~converter.runtimes.feeds.random_inputs`)."""
    if inputs is None:
        inputs, source = choose_inputs(normalized, seed=seed, ranges=ranges)
    else:
        source = f"{len(inputs)} given sample(s)"
    run_original, run_normalized = reference_runners or (original, None)
    report = verify_stages(run_original, port_stages(original, normalized, legalized, postprocess, target, artifact,
                                                     target_tolerances, run_normalized, legalized_runner),
                           inputs, tolerances, input_source=source,
                           noise_model=original if isinstance(original, onnx.ModelProto) else None)
    if out_dir is not None:
        if not report.ok:
            failed = report.first_failure
            files, flags = replay_files or (None, None), None
            if target_replay is not None and failed is not None and failed.name.startswith("target:"):
                files, flags = target_replay, runtimes
            write_replay(report, out_dir, *files, tolerances_path, shown_dir=shown_dir, runtimes=flags)
        write_outputs(report, out_dir)
    return report
