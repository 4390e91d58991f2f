"""``edgeconv port MODEL --to T --hw H``: the whole pipeline, with a summary table."""

from __future__ import annotations

from typing import List, Optional

import typer

from .options import InputShape, Json, MatrixOverlay, MatrixPath, ShapeList, TrustPickle


def register(app: typer.Typer) -> None:
    @app.command("port")
    def port_cmd(
        model: str = typer.Argument(..., help="Model file (.onnx, .pt, .pt2, .pb, .tflite, .keras, SavedModel dir)."),
        to: str = typer.Option(..., "--to", help="Framework: tflite, tnn, mace, coreml, or all."),
        hw: str = typer.Option(..., "--hw", help="Hardware as users say it (cpu, gpu, npu, dsp, ane, arm, ...), or all."),
        out: str = typer.Option("edgeconv-out", "-o", "--out", help="Output directory."),
        input_shape: ShapeList = InputShape,
        trust_pickle: bool = TrustPickle,
        matrix: Optional[str] = MatrixPath,
        matrix_overlay: Optional[List[str]] = MatrixOverlay,
        fp16_weights: bool = typer.Option(False, "--fp16-weights", help="Store weights as float16."),
        keep_nchw_io: bool = typer.Option(False, "--keep-nchw-io", help="TFLite: keep NCHW model inputs/outputs."),
        retrain_hook: Optional[str] = typer.Option(None, "--retrain-hook", help="pkg.module:function that fine-tunes architecture changes: called with the replacement blocks (an nn.ModuleDict) and returns them fitted."),
        custom_op: Optional[List[str]] = typer.Option(None, "--custom-op", help="Force an op type to become a custom layer (repeatable)."),
        inputs: Optional[str] = typer.Option(None, "--inputs", help="Verification inputs (.npz, several samples)."),
        atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance for verification."),
        rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance for verification."),
        tolerances: Optional[str] = typer.Option(None, "--tolerances", help="Tolerance profile (YAML)."),
        seed: int = typer.Option(0, "--seed", help="Seed for generated verification inputs."),
        no_verify: bool = typer.Option(False, "--no-verify", help="Skip the numerical verification."),
        json_out: bool = Json,
    ) -> int:
        """Convert a model for a framework × hardware, legalize it, export real files and verify them."""
        import shlex  # noqa: PLC0415
        import sys  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        from ..load import parse_shape_flags  # noqa: PLC0415
        from ..pipeline import PortOptions, load_stage  # noqa: PLC0415
        from .port_run import combinations, run_ports  # noqa: PLC0415

        base = PortOptions(
            target=to, hw=hw, out_dir=Path(out), input_shapes=parse_shape_flags(input_shape),
            trust_pickle=trust_pickle, matrix=matrix, matrix_overlays=tuple(matrix_overlay or ()),
            fp16_weights=fp16_weights, keep_nchw_io=keep_nchw_io, retrain_hook=retrain_hook,
            custom_ops=tuple(custom_op or ()), inputs_npz=inputs, atol=atol, rtol=rtol, tolerances=tolerances,
            seed=seed, verify=not no_verify, command_line="edgeconv " + shlex.join(sys.argv[1:]),
        )
        combos = combinations(base, to, hw)
        preloaded = load_stage(model, base)
        return run_ports(model, base, combos, preloaded, json_out)
