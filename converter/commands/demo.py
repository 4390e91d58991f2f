"""``edgeconv demo``: build a zoo model in torch, save it as TorchScript, and port it."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        out: str = typer.Option("demo-out", "-o", "--out", help="Where to write the demo model and results."),
        model: str = typer.Option("detector", "--model", help="Zoo model to build (see converter/zoo.py)."),
        to: str = typer.Option("tflite", "--to", help="Framework to port to."),
        hw: str = typer.Option("cpu", "--hw", help="Hardware to port to."),
    ) -> int:
        """Build a seeded zoo model (TorchScript .pt) and run `edgeconv port` on it."""
        import importlib.util  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        from ..errors import BadInput, MissingExtra  # noqa: PLC0415

        if importlib.util.find_spec("torch") is None:
            raise MissingExtra("torch", "the demo (it builds its model in torch)")
        import torch  # noqa: PLC0415

        from .. import zoo  # noqa: PLC0415
        from ..cli import main  # noqa: PLC0415

        if model not in zoo.NAMES:
            raise BadInput(f"unknown zoo model '{model}'; choose one of: {', '.join(zoo.NAMES)}")
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        shapes = zoo.input_shapes(model)
        net = zoo.build(model)
        path = out_dir / f"{model}.pt"
        traced = torch.jit.trace(net, tuple(torch.zeros(s) for s in shapes.values()))
        torch.jit.save(traced, str(path))
        shape_flags = [f"{name}={'x'.join(map(str, s))}" for name, s in shapes.items()]
        args = ["port", str(path), "--to", to, "--hw", hw, "-o", str(out_dir / f"{to}-{hw}")]
        for flag in shape_flags:
            args += ["--input-shape", flag]
        print(f"built {path} (seeded {model}); running: edgeconv {' '.join(args)}")
        return main(args)
