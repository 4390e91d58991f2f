"""Run a manifest's jobs: content-hash cache, worker processes or Ray, one session per model.

Jobs whose cache key is unchanged are skipped (``job.json`` inside a job directory records it);
the others are grouped by model and each group runs in one worker through one
:class:`~converter.port.PortSession` (:mod:`.jobs`), whose job directories appear atomically.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ..infra.fsutil import atomic_write_text
from ..infra.outdirs import output_collection, remove_stale_outputs
from .jobs import JOB_FILE, PORT_STATUSES, JobResult, by_model, run_group
from .manifest import Job, load_manifest
from .reports import write_html_index, write_junit

EXIT_BATCH_FAILED = 6


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


#: What a batch writes directly into its output directory (job directories prove themselves).
SUMMARY_FILES = ("batch-summary.json", "junit.xml", "index.html")


def run_batch(manifest_path: str | Path, out_dir: str | Path | None = None, jobs: int = 1, force: bool = False,
              executor: str = "process", address: str | None = None, progress=None,
              runtimes: dict[str, str] | None = None) -> BatchResult:
    """``runtimes``: ``--runtime`` flags (framework -> path), over the manifest's ``runtimes:``
    and the EDGECONV_*_RUNTIME variables; the chosen paths are part of each job's cache key."""
    from ..targets.oracles import chosen_path, pluggable, validate

    manifest = load_manifest(manifest_path)
    for job in manifest.jobs:
        chosen = {fw: p for fw in pluggable() if (p := chosen_path(fw, {**(job.entry.get("runtimes") or {}),
                                                                 **(runtimes or {})}))}
        if chosen:
            validate(chosen)
            job.entry["runtimes"] = {fw: str(Path(p).resolve()) for fw, p in sorted(chosen.items())}
    if executor == "ray":  # an unreachable cluster is one line before any work, not a wait
        from .ray_executor import check_cluster

        check_cluster(address)
    with output_collection(out_dir if out_dir is not None else manifest.output, SUMMARY_FILES) as out:
        # Job directories of a batch killed with kill -9, half swapped in: edgeconv's by their markers.
        for prefix in (".partial-", ".old-"):
            remove_stale_outputs(out, prefix)
        return _run_jobs(manifest, out, force, executor, address, jobs, _never_raises(progress))


def _run_jobs(manifest, out: Path, force: bool, executor: str, address, jobs: int, progress) -> BatchResult:
    from ..matrix import DEFAULT_MATRIX

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
    """One session per model (its targets share the load and the reference outputs); up to
    ``jobs`` models at once, each in a worker process."""
    groups = by_model(todo)

    def record(data_list):
        for data in data_list:
            results[data["id"]] = r = JobResult(**data)
            if progress:
                progress(r)

    if jobs <= 1:
        for group in groups:
            record(run_group(group, str(out)))
        return
    pool = cf.ProcessPoolExecutor(max_workers=jobs, initializer=_ignore_sigint)
    try:
        futures = {pool.submit(run_group, group, str(out)): group for group in groups}
        for fut in cf.as_completed(futures):
            try:
                record(fut.result())
            except Exception as err:  # a crashed worker (e.g. killed): its jobs failed, the rest go on
                record([asdict(JobResult.of(job, "error", 70, f"worker failed: {type(err).__name__}: {err}"))
                        for job, _ in futures[fut]])
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

    from ..infra.limits import die_with_parent

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
