"""``edgeconv batch release.yaml [-j N]``: many models × targets × hardware, for CI."""

from __future__ import annotations


import typer


from .options import Json, Runtime, out_dir


def register(app: typer.Typer) -> None:
    @app.command("batch", short_help="Models x targets x hardware from a manifest, for CI.")
    def batch_cmd(
        manifest: str = typer.Argument(..., metavar="MANIFEST", help="Batch manifest (YAML): models × targets × hardware."),
        jobs: int = typer.Option(1, "-j", "--jobs", min=1, metavar="N", help="Parallel worker processes."),
        out: str | None = out_dir(None, "Output directory (default: the manifest's 'output')."),
        force: bool = typer.Option(False, "--force", help="Redo jobs even when their inputs are unchanged."),
        executor: str = typer.Option("process", "--executor", metavar="process|ray", help="Where jobs run: local worker processes or a Ray cluster."),
        address: str | None = typer.Option(None, "--address", metavar="ADDR", help="Ray cluster address (with --executor ray)."),
        runtime: list[str] | None = Runtime,
        json_out: bool = Json,
    ) -> int:
        """Run a release manifest; writes batch-summary.json, junit.xml and index.html."""
        import json
        import sys

        from rich.console import Console
        from rich.markup import escape  #  (job ids and reasons are user text)

        from ...batch import run_batch
        from ...errors import BadInput, Interrupted

        if executor not in ("process", "ray"):
            raise BadInput(f"--executor must be 'process' or 'ray', not '{executor}'")
        err = Console(stderr=True, soft_wrap=True)  # progress: one line per job, never folded

        def progress(r):
            style = "green" if r.status == "ok" else "red"
            note = " (cached)" if r.cached else ""
            err.print(f"[{style}]{r.status:>13}[/] {escape(f'{r.id}{note} {r.reason}')}")

        from ...targets.oracles import parse_runtime_flags

        result = run_batch(manifest, out, jobs=jobs, force=force, executor=executor, address=address,
                           progress=progress, runtimes=parse_runtime_flags(runtime))
        counts = result.counts()
        if json_out:
            print(json.dumps({"out_dir": str(result.out_dir), "exit_code": result.exit_code, "counts": counts},
                             indent=2, sort_keys=True))
        else:
            print(f"{len(result.results)} jobs: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f"; summary in {result.out_dir / 'batch-summary.json'}", file=sys.stdout)
        if result.interrupted:
            not_run = counts.get("interrupted", 0)
            raise Interrupted(f"interrupted: {not_run} of {len(result.results)} jobs not run; "
                              f"run the same command again to finish them")
        return result.exit_code
