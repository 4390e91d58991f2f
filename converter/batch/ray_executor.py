"""Fan batch jobs out over a Ray cluster (the ``ray`` extra, imported only here).

The same ``run_group`` function (one session per model) runs on each Ray worker, so cache keys, atomic job directories
and summaries are identical to the local process pool.  The output directory must be on a file
system every node sees (on a single machine, or a shared mount on a cluster).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator

from ..errors import BadInput, MissingExtra


#: Seconds to reach a cluster's address before the batch gives up on it (exit 2).
CONNECT_TIMEOUT_S = 10.0


def check_cluster(address: str | None) -> None:
    """Before any work: the ray extra is installed, and an ``--address`` of the form HOST:PORT or
    ray://HOST:PORT answers a TCP connection within :data:`CONNECT_TIMEOUT_S` (``ray.init`` would
    wait for an unreachable one for many minutes).  ``auto``, ``local`` and no address start or
    find a cluster on this machine: Ray answers those itself."""
    import socket

    if importlib.util.find_spec("ray") is None:
        raise MissingExtra("ray", "--executor ray")
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"--address {address}: expected HOST:PORT or ray://HOST:PORT (or auto)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        why = "no answer" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__)
        raise BadInput(f"cannot connect to Ray at {address}: {why} (tried for up to {CONNECT_TIMEOUT_S:g} s)") from None


def run_on_ray(todo, out_dir: str, address: str | None) -> Iterator[dict]:
    check_cluster(address)
    import ray

    from .jobs import by_model, run_group

    started_here = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False, include_dashboard=False, logging_level=logging.ERROR)
            else:
                ray.init(log_to_driver=False, include_dashboard=False, logging_level=logging.ERROR)
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
