"""Run a manifest's jobs: content-hash cache, worker processes or Ray, atomic job directories.

A job's files appear only when the job is complete: each job is ported into
``<out>/.partial-<job>-<token>/`` and then renamed to ``<out>/<job>/`` (a directory rename is
atomic), so a batch killed at any moment (even ``kill -9``) leaves either the old complete job
directory or none, plus temp directories that the next run removes.  ``job.json`` inside the job
directory records the cache key; a rerun skips a job whose key is unchanged.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..infra.fsutil import atomic_write_text, remove_stale, swap_in_dir
from .manifest import Job, load_manifest
from .reports import write_html_index, write_junit

JOB_FILE = "job.json"
EXIT_BATCH_FAILED = 6
#: Statuses of a port that finished (its directory is complete); only "ok" passes.
PORT_STATUSES = ("ok", "unsupported", "verify_failed", "needs_custom", "unverified")


@dataclass
class JobResult:
    id: str
    model: str
    target: str
    hw: str
    status: str  # ok | unsupported | verify_failed | needs_custom | unverified | bad_input | error | interrupted
    exit_code: int
    reason: str = ""
    seconds: float = 0.0
    cached: bool = False
    files: list[str] = field(default_factory=list)
    #: What judged the target stage ("TNN x86 runtime (tnn_run)", "edgeconv MACE reader (...)").
    oracle: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "ok"


@dataclass
class BatchResult:
    out_dir: Path
    results: list[JobResult]
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 0 if all(r.passed for r in self.results) else EXIT_BATCH_FAILED

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        counts["cached"] = sum(r.cached for r in self.results)
        return dict(sorted(counts.items()))


def cache_key(job: Job, matrix_path: Path) -> str:
    h = hashlib.sha256()
    h.update(f"edgeconv {__version__}\n".encode())
    h.update(job.entry_json().encode())
    files = [Path(job.entry[k]) for k in ("calibration", "tolerances", "inputs") if job.entry.get(k)]
    spec = job.entry.get("preprocess")
    if spec and spec.lower().endswith((".yaml", ".yml")):
        files.append(Path(spec))
    for path in [job.model_path, matrix_path] + files:
        h.update(b"\0" + str(path.name).encode() + b"\0")
        _hash_path(h, path)
    return h.hexdigest()


def _hash_path(h, path: Path) -> None:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)


def _npz(path: str | None) -> str | None:
    """A manifest's calibration .npz also serves as verification inputs (what it meant before
    quantization existed); a calibration directory does not."""
    return path if path and path.lower().endswith(".npz") else None


def _cached_result(job: Job, key: str, out_dir: Path) -> JobResult | None:
    record = out_dir / job.id / JOB_FILE
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if data.get("cache_key") != key or data.get("status") not in PORT_STATUSES:
        return None
    result = JobResult(**data["result"])
    result.cached = True
    return result


def run_job(job: Job, out_dir: str, key: str) -> dict[str, Any]:
    """Port one job into a temp directory, then move it into place.  Runs in a worker."""
    from ..errors import EdgeconvError
    from ..port.pipeline import PortOptions, port

    out = Path(out_dir)
    partial = out / f".partial-{os.getpid()}-{uuid.uuid4().hex[:8]}-{job.id}"
    e = job.entry
    shapes = {k: tuple(v) for k, v in (e.get("input_shapes") or {}).items()}
    opts = PortOptions(
        target=job.target, hw=job.hw, out_dir=partial, input_shapes=shapes,
        trust_pickle=bool(e.get("trust_pickle")), fp16_weights=bool(e.get("fp16_weights")),
        keep_nchw_io=bool(e.get("keep_nchw_io")), custom_ops=tuple(e.get("custom_ops") or ()),
        inputs_npz=e.get("inputs") or _npz(e.get("calibration")), atol=e.get("atol"), rtol=e.get("rtol"),
        tolerances=e.get("tolerances"), command_line=f"edgeconv batch (job {job.id})",
        quantize=e.get("quantize"), calibration=e.get("calibration"),
        calibration_method=e.get("calibration_method", "minmax"), per_tensor=bool(e.get("per_tensor")),
        bias_correction=bool(e.get("bias_correction", True)),
        preprocess=e.get("preprocess"), runtimes=dict(e.get("runtimes") or {}),
        timeout=e.get("timeout"), max_memory=e.get("max_memory"),
    )
    from ..infra.isolate import set_time_limit

    set_time_limit(e.get("timeout"))  # this worker's onnxruntime runs too
    start = time.perf_counter()
    result = JobResult(job.id, job.model_name, job.target, job.hw, "error", 70)
    try:
        port_result = port(str(job.model_path), opts)
        result.status, result.exit_code, result.reason = port_result.status, port_result.exit_code, port_result.reason
        result.files = port_result.files
        result.oracle = port_result.oracle
    except EdgeconvError as err:
        result.status = "bad_input" if err.exit_code == 2 else "error"
        result.exit_code, result.reason = err.exit_code, str(err)
    except Exception as err:  # noqa: BLE001 - one failing job never stops the others
        result.reason = f"internal error: {type(err).__name__}: {err}"
    result.seconds = round(time.perf_counter() - start, 3)
    if result.status in PORT_STATUSES:
        partial.mkdir(parents=True, exist_ok=True)
        atomic_write_text(partial / JOB_FILE, json.dumps({"cache_key": key, "status": result.status,
                                                          "result": asdict(result)}, indent=2, sort_keys=True))
        _swap_into_place(partial, out / job.id)
    else:
        shutil.rmtree(partial, ignore_errors=True)
    return asdict(result)


def _swap_into_place(partial: Path, final: Path) -> None:
    swap_in_dir(partial, final)


def _clean_stale(out_dir: Path) -> None:
    # Temp directories of jobs whose worker is gone (a batch killed with kill -9); the names
    # carry the worker's pid (older versions' names carry none: removed as before).
    for prefix in (".partial-", ".old-"):
        remove_stale(out_dir, prefix, legacy=True)


def run_batch(manifest_path: str | Path, out_dir: str | Path | None = None, jobs: int = 1, force: bool = False,
              executor: str = "process", address: str | None = None, progress=None,
              runtimes: dict[str, str] | None = None) -> BatchResult:
    """``runtimes``: ``--runtime`` flags (framework -> path), over the manifest's ``runtimes:``
    and the EDGECONV_*_RUNTIME variables; the chosen paths are part of each job's cache key."""
    from ..matrix import DEFAULT_MATRIX
    from ..runtimes import ENV, chosen_path, validate

    manifest = load_manifest(manifest_path)
    for job in manifest.jobs:
        chosen = {fw: p for fw in ENV if (p := chosen_path(fw, {**(job.entry.get("runtimes") or {}),
                                                                 **(runtimes or {})}))}
        if chosen:
            validate(chosen)
            job.entry["runtimes"] = {fw: str(Path(p).resolve()) for fw, p in sorted(chosen.items())}
    progress = _never_raises(progress)
    out = Path(out_dir).resolve() if out_dir else manifest.output
    out.mkdir(parents=True, exist_ok=True)
    _clean_stale(out)
    matrix_path = DEFAULT_MATRIX
    results: dict[str, JobResult] = {}
    todo: list[tuple[Job, str]] = []
    for job in manifest.jobs:
        key = cache_key(job, matrix_path)
        hit = None if force else _cached_result(job, key, out)
        if hit is not None:
            results[job.id] = hit
            if progress:
                progress(hit)
        else:
            todo.append((job, key))
    interrupted = False
    try:
        if executor == "ray":
            from .ray_executor import run_on_ray

            for data in run_on_ray(todo, str(out), address):
                results[data["id"]] = r = JobResult(**data)
                if progress:
                    progress(r)
        else:
            _run_local(todo, out, jobs, results, progress)
    except KeyboardInterrupt:
        interrupted = True
    for job, _ in todo:
        if job.id not in results:
            results[job.id] = JobResult(job.id, job.model_name, job.target, job.hw, "interrupted", 130,
                                        "not run: the batch was interrupted")
    ordered = [results[j.id] for j in manifest.jobs]
    result = BatchResult(out, ordered, interrupted)
    _write_summaries(result, manifest)
    return result


def _never_raises(progress):
    """A progress display that fails (a terminal gone, odd text) never costs the batch its
    summary and JUnit file."""
    if progress is None:
        return None

    def call(result):
        try:
            progress(result)
        except Exception:  # noqa: BLE001
            pass

    return call


def _run_local(todo, out: Path, jobs: int, results: dict, progress) -> None:
    if jobs <= 1:
        for job, key in todo:
            results[job.id] = r = JobResult(**run_job(job, str(out), key))
            if progress:
                progress(r)
        return
    pool = cf.ProcessPoolExecutor(max_workers=jobs, initializer=_ignore_sigint)
    try:
        futures = {pool.submit(run_job, job, str(out), key): job for job, key in todo}
        for fut in cf.as_completed(futures):
            job = futures[fut]
            try:
                r = JobResult(**fut.result())
            except Exception as err:  # a crashed worker (e.g. killed): that job failed, the rest go on
                r = JobResult(job.id, job.model_name, job.target, job.hw, "error", 70,
                              f"worker failed: {type(err).__name__}: {err}")
            results[job.id] = r
            if progress:
                progress(r)
    except KeyboardInterrupt:
        # Take the worker list first: shutdown() drops the executor's reference to it.
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            proc.terminate()
        raise
    pool.shutdown(wait=True)


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group; the parent alone handles it (and stops the
    # workers), so workers must not die printing tracebacks of their own.  A parent killed with
    # kill -9 cannot stop them: the kernel does (PR_SET_PDEATHSIG), so no orphan finishes jobs
    # behind a rerun's back.
    import signal

    from ..infra.isolate import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def _write_summaries(result: BatchResult, manifest) -> None:
    summary = {
        "edgeconv_version": __version__,
        "manifest": str(manifest.path),
        "out_dir": str(result.out_dir),
        "exit_code": result.exit_code,
        "interrupted": result.interrupted,
        "counts": result.counts(),
        "jobs": [asdict(r) for r in result.results],
    }
    atomic_write_text(result.out_dir / "batch-summary.json", json.dumps(summary, indent=2, sort_keys=True))
    write_junit(result.results, result.out_dir / "junit.xml")
    write_html_index(result.results, result.out_dir / "index.html", manifest.path.name)
