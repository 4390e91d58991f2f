"""The body of ``edgeconv port``: pick framework × hardware combinations, run, summarize."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ...errors import EXIT_OK, EXIT_UNSUPPORTED, BadInput, EdgeconvError


def combinations(base, to: str, hw: str | None) -> list[tuple[str, str]]:
    """``--to``/``--hw`` (each possibly ``all``; ``hw`` None: each framework's CPU) ->
    [(framework, resolved hardware)]."""
    from ... import targets
    from ...matrix import load_matrix
    from .options import default_hw

    matrix = load_matrix(base.matrix, base.matrix_overlays)
    frameworks = [fw for fw in targets.names() if fw in matrix.frameworks] if to == "all" else [to]
    for fw in frameworks:
        if fw not in targets.names():
            raise BadInput(f"unknown framework '{fw}' for --to; choose one of: {', '.join(targets.names())}, all")
    if hw is None:
        return [(fw, matrix.resolve_hw(fw, default_hw(fw))) for fw in frameworks]
    # A class word (TNN's "npu", "gpu") ports to every hardware it names, as "all" does.
    pairs = [p for p in matrix.resolve_targets(to, hw) if p[0] in frameworks]
    if not pairs:
        raise BadInput(f"no framework has hardware '{hw}'")
    return pairs


def run_ports(model: str, base, combos, preloaded, json_out: bool, jobs: int = 1) -> int:
    """Port to every combination; with several, they share the loaded model and the reference
    outputs (``pipeline.shared_work``), and up to ``jobs`` run at once (threads: the heavy parts,
    onnxruntime, LiteRT, numpy, release the GIL)."""
    from ...port.pipeline import port, shared_work

    console = _stderr_console()
    many = len(combos) > 1
    shared = shared_work(preloaded) if many else None

    def one(fw, hw, progress=None):
        out_dir = Path(base.out_dir) / f"{fw}-{hw}" if many else Path(base.out_dir)
        opts = dataclasses.replace(base, target=fw, hw=hw, out_dir=out_dir)
        try:
            return port(model, opts, progress, preloaded, shared), None
        except EdgeconvError as err:
            if not many:
                raise
            return None, err
        except Exception as err:  # noqa: BLE001 - one broken combination must not hide the others
            if not many:
                raise
            return None, _internal(err)

    outcomes = []
    if jobs > 1 and many:
        from concurrent.futures import ThreadPoolExecutor

        with _status(console, f"[bold]{len(combos)} targets[/], {jobs} at a time") as status, \
                ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="port") as pool:
            futures = [pool.submit(one, fw, hw) for fw, hw in combos]
            for done, future in enumerate(futures, 1):
                outcomes.append(future.result())
                status.update(f"[bold]{len(combos)} targets[/], {jobs} at a time: {done} done")
    else:
        for fw, hw in combos:
            if console is None:
                outcomes.append(one(fw, hw))
                continue
            from rich.markup import escape

            label = escape(f"{fw}/{hw}")  # a matrix overlay names hardware: user text
            with _status(console, f"[bold]{label}[/]: starting") as status:
                def progress(stage, label=label, status=status):
                    status.update(f"[bold]{label}[/]: {escape(stage)}")
                outcomes.append(one(fw, hw, progress))
    results = [r for r, _ in outcomes if r is not None]
    failures = [(fw, hw, err) for (fw, hw), (_, err) in zip(combos, outcomes) if err is not None]
    from ...quantize.modes import CalibrationRequired

    # Hardware that needs calibration data (8-bit only) is one answer among others, not the cause.
    causes = [err for _, _, err in failures if not isinstance(err, CalibrationRequired)] or [e for _, _, e in failures]
    if not results and len({str(err) for err in causes}) == 1:
        raise causes[0]  # the same error for every target: the input is at fault, say it once
    if json_out:
        print(json.dumps({"results": [_result_json(r) for r in results],
                          "errors": [{"target": f, "hw": h, "error": str(e), "exit_code": e.exit_code}
                                     for f, h, e in failures]}, indent=2, sort_keys=True))
    else:
        from .port_summary import print_many, print_one

        if many:
            from .options import stdout_console

            print_many(stdout_console(), results, failures)
        else:
            print_one(None, results[0])
    if not many:
        return results[0].exit_code
    # "Where can my model run?": success if it runs somewhere.
    return EXIT_OK if any(r.status == "ok" for r in results) else EXIT_UNSUPPORTED


class _NoStatus:
    """What ``console.status`` shows on a console that is not a terminal: nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, *args, **kwargs) -> None:
        pass


def _stderr_console():
    """rich's console on stderr for the progress spinner; None where rich would draw none (not
    a terminal: rich itself is then not imported)."""
    import sys

    from .plain_table import not_a_terminal

    if not_a_terminal(sys.stderr):
        return None
    from rich.console import Console

    return Console(stderr=True)


def _status(console, text: str):
    """A spinner line on a terminal; on a pipe or file rich's status draws nothing, so it is not
    built (nor rich's live-display modules imported)."""
    return console.status(text) if console is not None and console.is_terminal else _NoStatus()


def _internal(err: Exception) -> EdgeconvError:
    wrapped = EdgeconvError(f"internal error: {type(err).__name__}: {err}")
    return wrapped


def _result_json(r) -> dict:
    return {"target": r.target, "hw": r.hw, "status": r.status, "exit_code": r.exit_code, "reason": r.reason,
            "oracle": r.oracle,
            "out_dir": str(r.out_dir), "files": r.files, "timings": r.timings}
