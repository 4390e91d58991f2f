"""One model's jobs of a batch, ported through one :class:`~converter.port.PortSession`.

The manifest's targets of one model share its load, its normalization and its reference outputs:
a worker (local process or Ray task) gets all the model's jobs that are not cached and runs them
in one session.  Each job is ported into ``<out>/.partial-<pid>-<token>-<job>/`` and then renamed
to ``<out>/<job>/`` (a directory rename is atomic), so a batch killed at any moment leaves either
the old complete job directory or none.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..infra.fsutil import atomic_write_text, write_output_marker
from ..infra.outdirs import swap_in_dir
from .manifest import Job

JOB_FILE = "job.json"
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

    @classmethod
    def of(cls, job: Job, status: str, exit_code: int, reason: str = "") -> JobResult:
        return cls(job.id, job.model_name, job.target, job.hw, status, exit_code, reason)


def port_flags(entry: dict[str, Any], job_id: str) -> dict[str, Any]:
    """A manifest entry as the port's flat options (:data:`converter.port.request.FLAGS`): the
    manifest spells them the same way.  A calibration .npz also serves as verification inputs
    (what it meant before quantization existed); a calibration directory does not."""
    from ..port.request import FLAGS

    flags = {k: v for k, v in entry.items() if k in FLAGS}
    calibration = entry.get("calibration")
    if not entry.get("inputs") and calibration and calibration.lower().endswith(".npz"):
        flags["inputs"] = calibration
    flags["command_line"] = f"edgeconv batch (job {job_id})"
    return flags


def run_group(group: list[tuple[Job, str]], out_dir: str) -> list[dict[str, Any]]:
    """Port the jobs of one model (each with its cache key) through one session; one result
    dict per job.  Runs in a worker."""
    from ..infra.limits import set_time_limit
    from ..port import PortRequest, PortSession

    first = group[0][0]
    set_time_limit(first.entry.get("timeout"))  # this worker's onnxruntime runs too
    start = time.perf_counter()
    try:
        session = PortSession.open(PortRequest.from_flags(str(first.model_path), **port_flags(first.entry, first.id)))
    except Exception as err:  # noqa: BLE001 - the model's jobs fail, the other models go on
        return [asdict(_failed(job, err, time.perf_counter() - start)) for job, _ in group]
    with session:
        return [asdict(_run_one(session, job, key, Path(out_dir))) for job, key in group]


def _run_one(session, job: Job, key: str, out: Path) -> JobResult:
    partial = out / f".partial-{os.getpid()}-{uuid.uuid4().hex[:8]}-{job.id}"
    start = time.perf_counter()
    try:
        port = session.run([(job.target, job.hw)], partial)[0]
        result = JobResult(job.id, job.model_name, job.target, job.hw, port.status, port.exit_code, port.reason,
                           files=port.files, oracle=port.oracle)
    except Exception as err:  # noqa: BLE001 - one failing job never stops the others
        result = _failed(job, err, 0.0)
    result.seconds = round(time.perf_counter() - start, 3)
    if result.status in PORT_STATUSES:
        partial.mkdir(parents=True, exist_ok=True)
        atomic_write_text(partial / JOB_FILE, json.dumps({"cache_key": key, "status": result.status,
                                                          "result": asdict(result)}, indent=2, sort_keys=True))
        write_output_marker(partial, "batch-job")  # job.json is edgeconv's too
        swap_in_dir(partial, out / job.id)
    else:
        shutil.rmtree(partial, ignore_errors=True)
    return result


def _failed(job: Job, err: Exception, seconds: float) -> JobResult:
    from ..errors import EdgeconvError

    if isinstance(err, EdgeconvError):
        result = JobResult.of(job, "bad_input" if err.exit_code == 2 else "error", err.exit_code, str(err))
    else:
        result = JobResult.of(job, "error", 70, f"internal error: {type(err).__name__}: {err}")
    result.seconds = round(seconds, 3)
    return result


def by_model(todo: list[tuple[Job, str]]) -> list[list[tuple[Job, str]]]:
    """The jobs grouped by model (same file, same options), in manifest order."""
    groups: dict[tuple, list] = {}
    for job, key in todo:
        groups.setdefault((job.model_name, json.dumps(job.entry, sort_keys=True, default=str)), []).append((job, key))
    return list(groups.values())
