"""``edgeconv plan MODEL --to T --hw H``: per node, the verdict, the chosen remedy and why.

Remedies: supported, rewrite (a chain of exact/approximate rules), retrain (the chain changes
the architecture; weights are fitted), fallback (the runtime runs it on its fallback unit; the
partitions it makes are printed), postprocess (trailing: generated code), custom (a custom
layer must be written).  Exit 0 when no node needs a custom layer, else 3; ``--json`` prints
``{"model": ..., "plans": [Plan.to_json(), ...]}``.
"""

from __future__ import annotations


import typer

from .options import (Framework, HardwareOrAll, Json, MatrixSource, ModelSource, matrix_options,
                      model_options, stdout_console)

_STYLE = {"supported": "green", "rewrite": "cyan", "retrain": "magenta", "fallback": "blue", "postprocess": "yellow",
          "custom": "bold red", "unsupported": "bold red"}


def register(app: typer.Typer) -> None:
    @app.command("plan", short_help="How each unsupported node will be made to run.")
    @model_options()
    @matrix_options()
    def plan_cmd(
        to: str = Framework,
        hw: str | None = HardwareOrAll,
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
        all_nodes: bool = typer.Option(False, "--all-nodes", help="Also list the supported nodes."),
        json_out: bool = Json,
    ) -> None:
        """Explain, node by node, how the model will be made to run (rewrite, retrain, split, custom)."""
        from ...errors import EXIT_UNSUPPORTED
        from ...legalize.plan import plan_model

        m = matrix.load()
        from ...port.resolve import resolve_pairs

        pairs = resolve_pairs(m, to, hw, exporters_only=False, all_hw_by_default=True)
        onnx_model = source.normalized(require_static=False)
        plans = [plan_model(onnx_model, fw, h, m) for fw, h in pairs]
        if json_out:
            import json

            print(json.dumps({"model": source.path, "plans": [p.to_json() for p in plans]}, indent=2))
        else:
            for p in plans:
                _print_plan(p, source.path, all_nodes)
        if any(p.by_remedy("custom") or p.by_remedy("unsupported") for p in plans):
            raise typer.Exit(EXIT_UNSUPPORTED)


def _print_plan(plan, model: str, all_nodes: bool) -> None:
    from rich.markup import escape  #  (node/op names and reasons are user text)
    from rich.table import Table

    console = stdout_console()
    table = Table()
    for col in ("node", "op", "verdict", "remedy", "rules", "why"):
        table.add_column(col, overflow="fold")
    shown = [e for e in plan.entries if all_nodes or e.remedy != "supported"]
    for e in shown:
        table.add_row(escape(e.node), escape(e.op), escape(e.verdict), f"[{_STYLE[e.remedy]}]{e.remedy}[/]",
                      escape(" → ".join(e.rules) or "-"), escape(e.reason))
    if shown:
        console.print(f"{escape(model)} on {plan.framework}/{plan.hw}", highlight=False)
        console.print(table)
    counts = ", ".join(f"{len(plan.by_remedy(r))} {r}" for r in _STYLE if plan.by_remedy(r))
    console.print(escape(f"{plan.framework}/{plan.hw}: {len(plan.entries)} nodes: {counts}"), highlight=False)
    if plan.partitions is not None:
        console.print(f"partitions: {plan.partitions.summary()}", highlight=False, markup=False)
    for entry in plan.may_stay_on_cpu:
        from ...legalize.partition import compiler_summary

        console.print(f"may run on CPU: {compiler_summary(entry)}", highlight=False, markup=False)
