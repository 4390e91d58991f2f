"""``edgeconv check MODEL --to T --hw H``: which nodes run where, and exactly why not.

Exit codes: 0 when every node (and the model) is supported on every requested target, 3
(``EXIT_UNSUPPORTED``) when something is not, 2 for bad input.  ``--json`` prints the
``edgeconv.check/1`` document described in ``converter/legalize/check.py``.
"""

from __future__ import annotations


import typer

from .options import (Framework, HardwareOrAll, Json, MatrixSource, ModelSource, matrix_options,
                      model_options, stdout_console)

_MARK = {"supported": "ok", "unverified": "?", "unsupported": "NO"}
_STYLE = {"supported": "green", "unverified": "yellow", "unsupported": "bold red"}


def register(app: typer.Typer) -> None:
    @app.command("check", short_help="Which nodes run on a framework x hardware, and why not.")
    @model_options()
    @matrix_options()
    def check_cmd(
        to: str = Framework,
        hw: str | None = HardwareOrAll,
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
        json_out: bool = Json,
    ) -> None:
        """Check every node against the op support matrix (exit 3 when something is unsupported)."""
        from ...legalize.check import add_fallback, check_targets, results_to_json
        from ...errors import EXIT_UNSUPPORTED

        m = matrix.load()
        from ...port.resolve import resolve_pairs

        pairs = resolve_pairs(m, to, hw, exporters_only=False, all_hw_by_default=True)
        model = source.normalized(require_static=False)
        results = check_targets(model, pairs, m)
        add_fallback(results, model, m)
        if json_out:
            import json

            print(json.dumps(results_to_json(results, source.path), indent=2))
        elif len(results) == 1:
            _print_one(results[0], source.path)
        else:
            _print_many(results, source.path)
        if not all(r.ok for r in results):
            raise typer.Exit(EXIT_UNSUPPORTED)


def _group_by_op(result) -> dict[str, list]:
    groups: dict[str, list] = {}
    for v in result.verdicts:
        groups.setdefault(v.op, []).append(v)
    return dict(sorted(groups.items()))


def _print_one(result, model: str) -> None:
    from rich.markup import escape  #  (model, op and tensor names are user text)
    from rich.table import Table

    console = stdout_console()
    console.print(f"{escape(model)} on {result.framework}/{result.hw}", highlight=False)
    table = Table()
    for col, justify in (("op", "left"), ("nodes", "right"), ("status", "left"), ("maps to", "left"),
                         ("reason", "left")):
        table.add_column(col, justify=justify)
    for op, verdicts in _group_by_op(result).items():
        statuses = sorted({v.status for v in verdicts}, key=["unsupported", "unverified", "supported"].index)
        status = " / ".join(f"{sum(v.status == s for v in verdicts)} {s}" for s in statuses)
        reasons = sorted({v.reason for v in verdicts if v.status != "supported"})
        table.add_row(escape(op), str(len(verdicts)), f"[{_STYLE[statuses[0]]}]{status}[/]",
                      escape(verdicts[0].target or "-"), escape("\n".join(reasons)))
    console.print(table)
    for issue in result.model_issues:
        console.print(f"[{_STYLE[issue.status]}]model: {escape(issue.reason)}[/]")
    console.print(escape(result.summary()), highlight=False)
    _print_fallback(console, result)


def _print_fallback(console, result) -> None:
    fb = result.fallback
    if fb is None:
        return
    if fb["to"] is None:
        console.print(f"fallback: none ({fb['reason']})", highlight=False, markup=False)
    elif fb["partitions"]:
        console.print(f"fallback to {fb['to']}: {fb['partitions']['summary']}", highlight=False, markup=False)
    else:
        console.print(f"fallback to {fb['to']}: not needed after rewrites, or {fb['to']} cannot run the rest either",
                      highlight=False, markup=False)


def _print_many(results, model: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = stdout_console()
    console.print(f"{escape(model)}: ops x framework/hardware (ok / ? unverified / NO unsupported)", highlight=False)
    table = Table()
    table.add_column("op")
    table.add_column("nodes", justify="right")
    for r in results:
        table.add_column(escape(f"{r.framework}\n{r.hw}"), justify="center")
    ops = sorted({v.op for v in results[0].verdicts})
    per_result = [_group_by_op(r) for r in results]
    for op in ops:
        row = [escape(op), str(len(per_result[0][op]))]
        for groups in per_result:
            statuses = {v.status for v in groups[op]}
            worst = next(s for s in ("unsupported", "unverified", "supported") if s in statuses)
            row.append(f"[{_STYLE[worst]}]{_MARK[worst]}[/]")
        table.add_row(*row)
    console.print(table)
    for r in results:
        console.print(escape(r.summary()), highlight=False)
        for reason in sorted({v.reason for v in r.verdicts if v.status == "unsupported"}):
            console.print(f"    {escape(reason)}", highlight=False)
        for issue in r.model_issues:
            console.print(f"    model: {escape(issue.reason)}", highlight=False)
        if r.fallback and r.fallback["partitions"]:
            console.print(f"    fallback to {r.fallback['to']}: {r.fallback['partitions']['summary']}",
                          highlight=False, markup=False)
    ok = sum(r.ok for r in results)
    console.print(f"{ok} of {len(results)} framework/hardware targets run the whole model", highlight=False)
