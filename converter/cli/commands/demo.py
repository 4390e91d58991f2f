"""``edgeconv demo``: build a zoo model in torch, save it as TorchScript, and port it."""

from __future__ import annotations


import typer

from .options import Hardware, out_dir


def register(app: typer.Typer) -> None:
    @app.command("demo", short_help="Build a zoo model in torch, save it as TorchScript, port it.")
    def demo_cmd(
        out: str = out_dir("demo-out", "Where to write the demo model and results."),
        model: str = typer.Option("detector", "--model", metavar="ZOO_NAME",
                                  help="Zoo model to build: mobilenetv2, resnet, unet, superres, detector, "
                                       "transformer or normalized_input."),
        to: str = typer.Option("tflite", "--to", "-t", metavar="FRAMEWORK", help="Framework: tflite, tnn, mace, coreml, or all."),
        hw: str | None = Hardware,
    ) -> int:
        """Build a seeded zoo model (TorchScript .pt) and run `edgeconv port` on it."""
        import importlib.util
        import inspect
        from ...errors import BadInput, MissingExtra

        if importlib.util.find_spec("torch") is None:
            raise MissingExtra("torch", "the demo (it builds its model in torch)")
        import torch

        from ...demo import zoo
        from ...port.resolve import default_hw
        from .. import main

        if model not in zoo.NAMES:
            raise BadInput(f"unknown zoo model '{model}'; choose one of: {', '.join(zoo.NAMES)}")
        from ...infra.outdirs import output_collection

        with output_collection(out, (f"{model}.pt",)) as out_dir:  # new, empty or edgeconv's: never a user's
            shapes = zoo.input_shapes(model)
            net = zoo.build(model)
            path = out_dir / f"{model}.pt"
            traced = torch.jit.trace(net, tuple(torch.zeros(s) for s in shapes.values()))
            torch.jit.save(traced, str(path))
            # TorchScript names its inputs after forward()'s parameters, not the zoo's names.
            names = [n for n in inspect.signature(net.forward).parameters if n != "self"]
            shape_flags = [f"{name}={'x'.join(map(str, s))}" for name, s in zip(names, shapes.values())]
            if hw is None and to != "all":
                hw = default_hw(to)
            hw_args = ["--hw", hw] if hw is not None else []  # --to all: port's default, each framework's CPU
            args = ["port", str(path), "--to", to, *hw_args, "-o", str(out_dir / f"{to}-{hw or 'cpu'}")]
            for flag in shape_flags:
                args += ["--input-shape", flag]
            print(f"built {path} (seeded {model}); running: edgeconv {' '.join(args)}")
            return main(args)
