"""``edgeconv verify ORIGINAL CONVERTED``: do two ONNX models compute the same thing, and if not,
where does the converted one start to differ?"""

from __future__ import annotations

from typing import List, Optional

import typer

from .options import InputShape, ShapeList


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify_cmd(
        original: str = typer.Argument(..., help="The reference ONNX model."),
        converted: str = typer.Argument(..., help="The converted ONNX model to check against it."),
        inputs: Optional[str] = typer.Option(None, "--inputs", help="Calibration samples (.npz, one array per input; an extra leading axis holds N samples)."),
        atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance per element (default 1e-4, or the profile's)."),
        rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance per element (default 1e-3, or the profile's)."),
        layer_tol: Optional[float] = typer.Option(None, "--layer-tol", help="Per-layer normalized rMSE above which a layer diverges (default 1e-3)."),
        tolerances: Optional[str] = typer.Option(None, "--tolerances", help="Tolerance profile (YAML: atol, rtol, layer_rmse, outputs: {name: {atol, rtol}})."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
        samples: int = typer.Option(1, "--samples", help="Number of random input samples."),
        value_range: Optional[List[str]] = typer.Option(None, "--range", help="Range of a float input's random values, e.g. input=0:1 (repeatable; a bare 0:1 applies to all)."),
        input_shape: ShapeList = InputShape,
        out_dir: Optional[str] = typer.Option(None, "-o", "--out-dir", help="Write verify.json, verify.html and, on failure, the replay files here (default on failure: <CONVERTED>.verify/)."),
        json_out: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
    ) -> None:
        """Compare CONVERTED with ORIGINAL on seeded or given inputs; name the first diverging layer."""
        import json  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        from ..errors import VerificationFailed  # noqa: PLC0415
        from ..load import parse_shape_flags  # noqa: PLC0415
        from ..verify import load_tolerances, verify_files  # noqa: PLC0415
        from ..verify.inputs import parse_range  # noqa: PLC0415
        from ..verify.pipeline import write_outputs  # noqa: PLC0415
        from ..verify.replay import write_replay  # noqa: PLC0415
        from ..verify.report import print_report, to_json  # noqa: PLC0415

        tols = load_tolerances(tolerances, atol=atol, rtol=rtol, layer_rmse=layer_tol)
        ranges = dict(parse_range(flag) for flag in value_range or [])
        shapes = parse_shape_flags(input_shape)
        report = verify_files(original, converted, tols, inputs_npz=inputs, seed=seed,
                              ranges=ranges, samples=samples, shapes=shapes or None)
        target_dir = Path(out_dir) if out_dir else None
        if not report.ok:
            target_dir = target_dir or Path(converted).with_name(Path(converted).stem + ".verify")
            write_replay(report, target_dir, original, converted, tolerances)
        if target_dir is not None:
            write_outputs(report, target_dir)
        if json_out:
            print(json.dumps(to_json(report), indent=2, sort_keys=True, allow_nan=False))
        else:
            print_report(report)
        if not report.ok:
            raise VerificationFailed(report.summary())

