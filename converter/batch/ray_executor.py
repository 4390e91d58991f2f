"""Fan batch jobs out over a Ray cluster (the ``ray`` extra, imported only here).

The same ``run_group`` function (one session per model) runs on each Ray worker, so cache keys, atomic job directories
and summaries are identical to the local process pool.  The output directory must be on a file
system every node sees (on a single machine, or a shared mount on a cluster).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

from ..errors import BadInput, MissingExtra


def run_on_ray(todo, out_dir: str, address: str | None) -> Iterator[dict]:
    if importlib.util.find_spec("ray") is None:
        raise MissingExtra("ray", "--executor ray")
    import ray

    from .jobs import by_model, run_group

    started_here = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False, include_dashboard=False)
            else:
                ray.init(log_to_driver=False, include_dashboard=False)
            started_here = True
        except Exception as err:  # noqa: BLE001
            raise BadInput(f"cannot connect to Ray{' at ' + address if address else ''}: {err}") from None
    remote = ray.remote(num_cpus=1, max_retries=0)(run_group)
    pending = {remote.remote(group, out_dir): group for group in by_model(todo)}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                group = pending.pop(ref)
                try:
                    yield from ray.get(ref)
                except Exception as err:  # noqa: BLE001 - a lost worker fails only its model's jobs
                    for job, _ in group:
                        yield {"id": job.id, "model": job.model_name, "target": job.target, "hw": job.hw,
                               "status": "error", "exit_code": 70,
                               "reason": f"ray task failed: {type(err).__name__}"}
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()
