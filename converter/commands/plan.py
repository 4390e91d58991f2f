"""``edgeconv plan MODEL --to T --hw H``: per node, the verdict, the chosen remedy and why.

Remedies: supported, rewrite (a chain of exact/approximate rules), retrain (the chain changes
the architecture; weights are fitted), postprocess (trailing: generated code), custom (a custom
layer must be written).  Exit 0 when no node needs a custom layer, else 3; ``--json`` prints
``{"model": ..., "plans": [Plan.to_json(), ...]}``.
"""

from __future__ import annotations

from typing import Optional

import typer

from .options import (Framework, HardwareOrAll, Json, MatrixSource, ModelSource, hw_or_default, matrix_options,
                      model_options, stdout_console)

_STYLE = {"supported": "green", "rewrite": "cyan", "retrain": "magenta", "postprocess": "yellow",
          "custom": "bold red", "unsupported": "bold red"}


def register(app: typer.Typer) -> None:
    @app.command("plan", short_help="How each unsupported node will be made to run.")
    @model_options()
    @matrix_options()
    def plan_cmd(
        to: str = Framework,
        hw: Optional[str] = HardwareOrAll,
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
        all_nodes: bool = typer.Option(False, "--all-nodes", help="Also list the supported nodes."),
        json_out: bool = Json,
    ) -> None:
        """Explain, node by node, how the model will be made to run (rewrite, retrain, split, custom)."""
        from ..errors import EXIT_UNSUPPORTED  # noqa: PLC0415
        from ..plan import plan_model  # noqa: PLC0415

        m = matrix.load()
        pairs = m.resolve_targets(to, hw_or_default(m, to, hw))
        onnx_model = source.normalized(require_static=False)
        from ..partition import fallback_for_plan  # noqa: PLC0415

        plans = [plan_model(onnx_model, fw, h, m) for fw, h in pairs]
        # On accelerators: what the plan leaves without a rewrite could run on the CPU instead.
        fallbacks = [fallback_for_plan(onnx_model, p, m) if not p.ok else None for p in plans]
        if json_out:
            import json  # noqa: PLC0415

            print(json.dumps({"model": source.path, "plans": [
                {**p.to_json(), **({"fallback": f.to_dict()} if f is not None else {})}
                for p, f in zip(plans, fallbacks)]}, indent=2))
        else:
            for p, f in zip(plans, fallbacks):
                _print_plan(p, source.path, all_nodes)
                if f is not None:
                    stdout_console().print(f"fallback: {f.summary()}", highlight=False)
        if any(p.by_remedy("custom") or p.by_remedy("unsupported") for p in plans):
            raise typer.Exit(EXIT_UNSUPPORTED)


def _print_plan(plan, model: str, all_nodes: bool) -> None:
    from rich.table import Table  # noqa: PLC0415

    console = stdout_console()
    table = Table()
    for col in ("node", "op", "verdict", "remedy", "rules", "why"):
        table.add_column(col, overflow="fold")
    shown = [e for e in plan.entries if all_nodes or e.remedy != "supported"]
    for e in shown:
        table.add_row(e.node, e.op, e.verdict, f"[{_STYLE[e.remedy]}]{e.remedy}[/]",
                      " → ".join(e.rules) or "-", e.reason)
    if shown:
        console.print(f"{model} on {plan.framework}/{plan.hw}", highlight=False)
        console.print(table)
    counts = ", ".join(f"{len(plan.by_remedy(r))} {r}" for r in _STYLE if plan.by_remedy(r))
    console.print(f"{plan.framework}/{plan.hw}: {len(plan.entries)} nodes: {counts}", highlight=False)
