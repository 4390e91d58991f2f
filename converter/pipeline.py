"""``port``: load → normalize → check → plan/legalize → split → export → verify → report.

The Python API behind ``edgeconv port`` and every batch job.  Each stage is one call into its
own module; this file only sequences them, times them, and decides the outcome:

* ``ok``             exit 0  — files written and verified (or nothing to verify against),
* ``unsupported``    exit 3  — some node has no remedy on this framework × hardware,
* ``verify_failed``  exit 4  — files written, but outputs differ beyond tolerance (or the real
  runtime refused the file),
* ``needs_custom``   exit 7  — files written, but they carry custom layers nobody has
  implemented yet ("needs custom kernels: N ops"); the target stage cannot run,
* ``unverified``     exit 8  — files written, ONNX stages match, but the built-in reader that
  stands in for the framework could not run the file (give a real runtime: ``--runtime``),
* bad input / missing extra / internal errors propagate as :mod:`converter.errors` exceptions.

Everything lands in ``out_dir`` atomically: files are produced in a temp directory beside it,
which replaces ``out_dir`` as a whole only when the port finished (successfully or with a
complete, failing verification report); see :func:`converter.fsutil.replace_output_dir`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import (EXIT_NEEDS_CUSTOM, EXIT_OK, EXIT_UNSUPPORTED, EXIT_UNVERIFIED, EXIT_VERIFY_FAILED, BadInput,
                     Unsupported)
from .fsutil import atomic_copy_file, atomic_write_text, replace_output_dir, sha256_file
from .memory import RELEASE_MIN_BYTES, release, weight_bytes
from .port_verify import (judge_integer_file, oracle_name, prefetch_legalized, retrain_note, shared_work,
                          start_reference_runs, verify_port_stages)

STATUS_EXIT = {"ok": EXIT_OK, "unsupported": EXIT_UNSUPPORTED, "verify_failed": EXIT_VERIFY_FAILED,
               "needs_custom": EXIT_NEEDS_CUSTOM, "unverified": EXIT_UNVERIFIED}


@dataclass
class PortOptions:
    target: str
    hw: str
    out_dir: Path
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    trust_pickle: bool = False
    matrix: str | None = None
    matrix_overlays: tuple[str, ...] = ()
    fp16_weights: bool = False
    keep_nchw_io: bool = False
    retrain_hook: str | None = None
    custom_ops: tuple[str, ...] = ()
    inputs_npz: str | None = None
    atol: float | None = None
    rtol: float | None = None
    tolerances: str | None = None
    seed: int = 0
    verify: bool = True
    command_line: str = ""
    #: Quantization (converter/quantize): --quantize, --calibration, --calibration-method,
    #: --per-tensor, --preprocess.  Hardware that runs only 8-bit implies quantization.
    quantize: str | None = None
    calibration: str | None = None
    calibration_method: str = "minmax"
    per_tensor: bool = False
    #: --no-bias-correction: keep round(b / scale) (TensorFlow's converter's biases).
    bias_correction: bool = True
    preprocess: str | None = None
    #: Real runtimes by framework (``--runtime tnn=PATH``, a manifest's ``runtimes:``); the
    #: environment variables fill in the rest (converter/runtimes).
    runtimes: dict[str, str] = field(default_factory=dict)
    #: --timeout (seconds user model code may run; 0 = no limit) and --max-memory (bytes).
    timeout: float | None = None
    max_memory: int | None = None


@dataclass
class PortResult:
    target: str
    hw: str
    status: str
    reason: str
    out_dir: Path
    files: list[str]
    timings: dict[str, float]
    report: dict[str, Any]
    #: The verify package's report object (tables, HTML chart), when verification ran.
    verification: Any = None
    #: The name of what judged the target stage ("TNN x86 runtime (tnn_run)", "LiteRT 2.3.0").
    oracle: str = ""

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.status]


class _Timer:
    def __init__(self, progress=None):
        self.timings: dict[str, float] = {}
        self.progress = progress
        self.heavy = False  # weights >= memory.RELEASE_MIN_BYTES: free dropped copies per stage

    @contextmanager
    def stage(self, name: str):
        if self.progress:
            self.progress(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            # graphsurgeon graphs are cyclic: what a stage dropped (whole copies of the weights)
            # is freed only by the cycle collector -- now, not during the next stage's peak.
            release(self.heavy)
            self.timings[name] = round(time.perf_counter() - start, 4)


#: Targets whose ports hold big weights by reference (converter/weights.py): their exporter reads
#: weights through graphsurgeon only.  The others get models holding their bytes.
BY_REFERENCE_TARGETS = frozenset({"tflite"})
#: Models with at least this many bytes in big initializers (``weights.MIN_BYTES`` each) hold
#: them by reference: a ResNet-18 (45 MB) then never copies them through graphsurgeon's export
#: (0.2 s of CPU per port); for a few MB the bookkeeping is not worth it.
STORE_MIN_BYTES = 16 << 20


def preload_steps(frameworks, verify: bool) -> list:
    """What the stages after loading import, as steps to run while a child process loads a torch
    model (:func:`converter.isolate.run_models`): on two cores the imports then cost no wall time."""
    from . import targets

    modules = ["onnx_graphsurgeon", "converter.normalize", "converter.legalize", "converter.check"]
    if verify:
        modules += ["onnxruntime", "converter.verify"]
    steps = [functools.partial(importlib.import_module, name) for name in modules]
    return steps + [targets.get(fw).preload for fw in dict.fromkeys(frameworks)]


def load_stage(model_path: str, opts: PortOptions, meanwhile=(), store=None):
    """Load and normalize; returns (original ONNX, normalized ONNX).  ``meanwhile``: steps to run
    while a torch model loads in its child process (:func:`preload_steps`).

    With a :class:`~converter.weights.WeightStore`, the big weights of a model with at least
    ``STORE_MIN_BYTES`` of them go into the store and both models refer to them (the caller
    keeps the store active while it uses the models: ``weights.holding(store)``)."""
    from . import weights
    from .load import load_model
    from .normalize import dynamic_inputs, normalize

    shapes = dict(opts.input_shapes)
    if Path(model_path).is_file():  # the report's model_sha256, while a child loads the model
        meanwhile = [functools.partial(sha256_file, model_path), *meanwhile]
    original = load_model(model_path, shapes, opts.trust_pickle, opts.timeout, meanwhile, store=store,
                          sha256=True)  # the report's model_sha256
    if opts.verify or opts.quantize:
        from .blas import use_all_cores

        use_all_cores()  # a torch/TF load forked its child single-threaded (converter/blas.py)
    if store is not None:
        if store.nbytes + weights.holdable_bytes(original) >= STORE_MIN_BYTES:
            weights.hold(original, store)  # big weights a non-ONNX source or the .onnx itself held
        else:  # small: not worth it; the models hold their bytes
            weights.materialize(original)
            store.clear()
            store = None
    if "" in shapes:
        shapes[original.graph.input[0].name] = shapes.pop("")
    with weights.holding(store):
        normalized = normalize(original, shapes or None)
    problems = dynamic_inputs(normalized)
    if problems:
        raise BadInput(problems[0])
    if opts.verify or opts.quantize:
        from .memory import check_memory

        check_memory(normalized, opts.max_memory)
    return original, normalized


def port(model_path: str, opts: PortOptions, progress=None, preloaded=None, shared=None) -> PortResult:
    """Port one model to one framework × hardware.

    ``preloaded`` = (original, normalized[, seconds it took]) skips loading; ``shared`` (a
    :class:`~converter.shared_work.SharedWork` of those models) shares the reference outputs
    between the ports of one model to several targets."""
    from . import targets
    from .check import check_model
    from .legalize import legalize
    from .load import save_onnx
    from .matrix import load_matrix
    from .quantize.port import plan_for_port
    from .targets.base import ExportOptions, Target

    from .runtimes import resolve

    timer = _Timer(progress)
    matrix = load_matrix(opts.matrix, opts.matrix_overlays)
    target: Target = targets.get(opts.target)
    hw = matrix.resolve_hw(opts.target, opts.hw or target.default_hw)
    runtime = resolve(opts.target, opts.runtimes, hw)
    quant_plan, quant = plan_for_port(opts, matrix, opts.target, hw), None
    report: dict[str, Any] = {
        "edgeconv_version": __version__,
        "command_line": opts.command_line,
        "model": str(model_path),
        "target": opts.target,
        "hw": hw,
    }
    out_dir = Path(opts.out_dir)
    from . import weights

    # The big weights held once, shared by every stage's model (converter/weights.py): for the
    # targets whose whole path reads weights through graphsurgeon or the weight store.
    by_reference = quant_plan is None and opts.target in BY_REFERENCE_TARGETS
    store = weights.WeightStore() if by_reference and not preloaded else None
    with replace_output_dir(out_dir) as tmp, contextlib.ExitStack() as held:
        if preloaded:  # loaded once for several targets; the caller may pass the time it took
            original, model = preloaded[:2]
            store = weights.store_of(model)
            if store is not None and not by_reference:  # this target's path reads the bytes
                original, model, store = weights.materialized(original), weights.materialized(model), None
            if store is not None:
                held.enter_context(weights.holding(store))
            timer.heavy = weight_bytes(model) >= RELEASE_MIN_BYTES
            timer.timings["load+normalize"] = preloaded[2] if len(preloaded) > 2 else 0.0
        else:
            with timer.stage("load+normalize"):
                original, model = load_stage(model_path, opts, preload_steps([opts.target], opts.verify), store)
                timer.heavy = weight_bytes(model) >= RELEASE_MIN_BYTES
            if weights.has_references(original):
                held.enter_context(weights.holding(store))
        early_samples = None  # the verification samples whose reference outputs started early
        if opts.verify and not timer.heavy:
            # The reference outputs are computed while legalize and export run (a worker
            # thread; onnxruntime uses the core the Python stages leave idle).  Not for big
            # models: their extra session would raise the peak memory.
            shared = shared if shared is not None else shared_work((original, model))
            early_samples = start_reference_runs(shared, model, opts)
        if Path(model_path).is_file():  # after loading: an .onnx was hashed from the bytes it read
            report["model_sha256"] = sha256_file(model_path)
        report["ops_before"] = _histogram(model)
        with timer.stage("check"):
            checked = check_model(model, opts.target, hw, matrix)
        report["check"] = checked.to_json()
        with timer.stage("legalize"):
            legal = legalize(model, opts.target, hw, matrix, retrain_hook=opts.retrain_hook,
                             custom_ops=opts.custom_ops)
        report["plan"] = legal.plan.to_json()
        report["applied_rules"] = [{"rule": r, "node": n} for r, n in legal.applied]
        final, postprocess = legal.model, None
        status, reason = "ok", ""
        if legal.custom_nodes:
            from .rewrites.custom import write_custom_layers

            with timer.stage("custom"):
                report["custom_layers"] = write_custom_layers(
                    final, legal.custom_nodes, opts.target, tmp / "custom",
                    reasons={e.node: e.reason for e in legal.plan.entries}, seed=opts.seed)
        if legal.unresolved:
            status = "unsupported"
            reason = "; ".join(legal.unresolved)
        elif legal.custom_nodes and not target.custom_layers:
            status = "unsupported"
            reason = (f"{opts.target} has no custom layers for ML Programs; nodes needing one: "
                      f"{', '.join(sorted(legal.custom_nodes))} (see custom/ for the composite-op path)")
        if status == "ok" and legal.postprocess_nodes:
            from .postproc import split

            with timer.stage("split"):
                max_outputs = matrix.properties(opts.target, hw).get("max_outputs")
                cut = split(final, set(legal.postprocess_nodes), max_outputs=max_outputs, out_dir=tmp / "postproc")
            final, postprocess = cut.model, cut
            report["postprocess"] = cut.manifest
        legalized_runner = None
        if shared is not None and opts.verify and status == "ok":
            if final is model:  # legalizing changed nothing: the normalized model's outputs
                legalized_runner = shared.normalized
            elif early_samples is not None:
                legalized_runner = prefetch_legalized(shared, final, early_samples)
        save_onnx(model, tmp / "normalized.onnx")
        if final is model and not (tmp / "normalized.onnx.data").exists():
            atomic_copy_file(tmp / "normalized.onnx", tmp / "legalized.onnx")  # legalize changed nothing
        else:
            save_onnx(final, tmp / "legalized.onnx")
        report["ops_after"] = _histogram(final)
        if quant_plan is not None and status == "ok":
            from .quantize.port import quantize_for_port

            with timer.stage("quantize"):
                quant = quantize_for_port(final, opts, quant_plan, target, tmp, warn=_warn, hw=hw,
                                          postprocess=postprocess.postprocess if postprocess is not None else None)
            report["quantization"] = _jsonable(quant.to_json())
        artifact = None
        if status == "ok":
            try:
                with timer.stage("export"):
                    artifact = target.export(quant.export_model if quant is not None else final, tmp, hw, ExportOptions(
                        fp16_weights=opts.fp16_weights or (quant is not None and quant.export_fp16),
                        keep_nchw_io=opts.keep_nchw_io,
                        # source_sha256: the user's file, which the files then name (CoreML's
                        # metadata), instead of the exporter hashing the ONNX it was given
                        extra={"name": _model_name(model_path), "fallback_nodes": sorted(legal.fallback_nodes),
                               **({"source_sha256": report["model_sha256"]} if "model_sha256" in report else {}),
                               **({"quantization": quant.export_spec()} if quant is not None and quant.native_integer
                                  else {})}))
            except Unsupported as err:
                # The matrix allowed the op but the exporter cannot express this instance of it
                # (e.g. a rank MACE's kernels lack): no remedy was planned for that, so say so.
                status, reason = "unsupported", f"export: {err}"
        if artifact is not None:
            report["artifact"] = {"runtime": artifact.runtime, "meta": _jsonable(artifact.meta),
                                  "files": sorted(str(Path(f).resolve().relative_to(tmp.resolve())) for f in artifact.files)}
        verdict, file_problem = None, None
        if status == "ok" and opts.verify:
            with timer.stage("verify"):
                try:
                    integer_file = quant is not None and quant.native_integer and artifact is not None
                    # An integer file is judged by SQNR against the float model (below), not by
                    # the float tolerances: the float stages are verified without it.
                    verdict = verify_port_stages(original, model, final, postprocess, None if integer_file else target,
                                      None if integer_file else artifact, opts, tmp, sorted(legal.custom_nodes),
                                      None if integer_file else runtime, out_dir, shared, legalized_runner)
                    if integer_file:
                        file_problem = judge_integer_file(quant, target, runtime, artifact)
                        report["quantization"] = _jsonable(quant.to_json())
                except BadInput as err:
                    if "onnxruntime" not in str(err) and "no value for" not in str(err):
                        raise
                    # Nothing to compare against (e.g. the original has an op onnxruntime lacks):
                    # the files are written, and the report says they are not verified.
                    verdict, reason = None, f"not verified: {err}"
            if verdict is not None:
                from .verify.report import to_json

                report["verification"] = to_json(verdict)
                if not verdict.ok:
                    status, reason = "verify_failed", verdict.summary() + retrain_note(legal, opts)
                elif verdict.unverified is not None and not legal.custom_nodes:
                    status, reason = "unverified", verdict.unverified.reason
            else:
                report["verification"] = {"ok": None, "summary": reason}
            if file_problem is not None and status == "ok":
                status, reason = file_problem
        if status == "ok" and legal.custom_nodes:
            nodes = sorted(legal.custom_nodes)
            status = "needs_custom"
            reason = (f"needs custom kernels: {len(nodes)} op{'s' if len(nodes) != 1 else ''} "
                      f"({', '.join(nodes)}); implement them from custom/ (each has a harness) before shipping"
                      + (f"; {reason}" if reason else ""))
        oracle = oracle_name(target, artifact, runtime, verdict, hw)
        report["oracle"] = oracle
        if quant is not None:
            status, reason = quant.port_status(status, reason)
            if (status == "unsupported" and not quant.native and artifact is not None
                    and not {"float32", "float16"} & set(matrix.properties(opts.target, hw).get("dtypes", []))):
                # The hardware loads integer models only: never ship the float file it cannot load.
                for f in artifact.files:
                    _remove(Path(f))
                report.pop("artifact", None)
                reason += f"; no {opts.target} file was written: {hw} cannot load a float model"
        report["status"], report["reason"] = status, reason
        report["timings"] = timer.timings
        atomic_write_text(tmp / "report.json", json.dumps(report, indent=2, sort_keys=True, default=str))
        from .report.port_page import write_port_page

        write_port_page(report, model, matrix, tmp / "report.html", verdict)
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
    return PortResult(opts.target, hw, status, reason, out_dir, files, timer.timings, report, verdict, oracle)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def _warn(line: str) -> None:
    import sys

    print(f"edgeconv: warning: {line}", file=sys.stderr)


def _model_name(model_path: str) -> str:
    import re

    stem = Path(model_path).name.split(".")[0] or "model"
    return re.sub(r"[^A-Za-z0-9_]", "_", stem)


def _histogram(model) -> dict[str, int]:
    from .graph import op_histogram

    return op_histogram(model)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))
