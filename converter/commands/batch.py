"""``edgeconv batch release.yaml [-j N]``: many models × targets × hardware, for CI."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("batch")
    def batch_cmd(
        manifest: str = typer.Argument(..., help="Batch manifest (YAML): models × targets × hardware."),
        jobs: int = typer.Option(1, "-j", "--jobs", min=1, help="Parallel worker processes."),
        out: Optional[str] = typer.Option(None, "-o", "--out", help="Output directory (default: the manifest's 'output')."),
        force: bool = typer.Option(False, "--force", help="Redo jobs even when their inputs are unchanged."),
        executor: str = typer.Option("process", "--executor", help="process (default) or ray."),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (with --executor ray)."),
        json_out: bool = typer.Option(False, "--json", help="Print the batch summary as JSON."),
    ) -> int:
        """Run a release manifest; writes batch-summary.json, junit.xml and index.html."""
        import json  # noqa: PLC0415
        import sys  # noqa: PLC0415

        from rich.console import Console  # noqa: PLC0415

        from ..batch import run_batch  # noqa: PLC0415
        from ..errors import BadInput  # noqa: PLC0415

        if executor not in ("process", "ray"):
            raise BadInput(f"--executor must be 'process' or 'ray', not '{executor}'")
        err = Console(stderr=True)

        def progress(r):
            style = "green" if r.status == "ok" else "red"
            note = " (cached)" if r.cached else ""
            err.print(f"[{style}]{r.status:>13}[/] {r.id}{note} {r.reason[:100]}")

        result = run_batch(manifest, out, jobs=jobs, force=force, executor=executor, address=address,
                           progress=progress)
        counts = result.counts()
        if json_out:
            print(json.dumps({"out_dir": str(result.out_dir), "exit_code": result.exit_code, "counts": counts},
                             indent=2, sort_keys=True))
        else:
            print(f"{len(result.results)} jobs: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f"; summary in {result.out_dir / 'batch-summary.json'}", file=sys.stdout)
        return result.exit_code
