"""The body of ``edgeconv port``: run the session's pairs with a spinner, summarize, exit code."""

from __future__ import annotations

import json

from ...errors import EXIT_OK, EXIT_UNSUPPORTED


def run_ports(session, pairs, out: str, json_out: bool, jobs: int = 1) -> int:
    """Port to every pair (:meth:`PortSession.run`), with a spinner on a terminal; print the
    summary (or JSON); the exit code."""
    results = _run_with_status(session, pairs, out, jobs)
    failures = [r for r in results if r.error is not None]
    done = [r for r in results if r.error is None]
    many = len(pairs) > 1
    from ...quantize.modes import CalibrationRequired

    # Hardware that needs calibration data (8-bit only) is one answer among others, not the cause.
    causes = [r.error for r in failures if not isinstance(r.error, CalibrationRequired)] or [r.error for r in failures]
    if not done and len({str(err) for err in causes}) == 1:
        raise causes[0]  # the same error for every target: the input is at fault, say it once
    if json_out:
        print(json.dumps({"results": [r.to_json() for r in done],
                          "errors": [{"target": r.target, "hw": r.hw, "error": str(r.error), "exit_code": r.exit_code}
                                     for r in failures]}, indent=2, sort_keys=True))
    else:
        from .port_summary import print_many, print_one

        if many:
            from .options import stdout_console

            print_many(stdout_console(), done, [(r.target, r.hw, r.error) for r in failures])
        else:
            print_one(None, done[0])
    if not many:
        return done[0].exit_code
    # "Where can my model run?": success if it runs somewhere.
    return EXIT_OK if any(r.status == "ok" for r in done) else EXIT_UNSUPPORTED


def _run_with_status(session, pairs, out: str, jobs: int) -> list:
    """``session.run`` under a spinner naming the pair and stage running (terminals only)."""
    console = _stderr_console()
    if console is None:
        return session.run(pairs, out, jobs=jobs)
    if jobs > 1 and len(pairs) > 1:
        with _status(console, f"[bold]{len(pairs)} targets[/], {jobs} at a time"):
            return session.run(pairs, out, jobs=jobs)
    from rich.markup import escape

    with _status(console, "[bold]starting[/]") as status:
        def progress(fw, hw, stage):
            # a matrix overlay names hardware: user text, never markup
            status.update(f"[bold]{escape(f'{fw}/{hw}')}[/]: {escape(stage)}")
        return session.run(pairs, out, progress=progress)


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
