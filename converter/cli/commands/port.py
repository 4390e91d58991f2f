"""``edgeconv port MODEL --to T --hw H``: the whole pipeline, with a summary table."""

from __future__ import annotations


import typer

from .options import (Atol, Calibration, CalibrationMethod, Framework, Hardware, InputRange, Json, MatrixSource,
                      ModelSource, NoBiasCorrection, PerTensor, Preprocess, Quantize, Rtol, Runtime, Seed, Tolerances, VerifyInputs,
                      matrix_options, model_options, out_dir)


def register(app: typer.Typer) -> None:
    @app.command("port", short_help="The whole pipeline: legalize, export real files, verify.")
    @model_options()
    @matrix_options()
    def port_cmd(
        to: str = Framework,
        hw: str | None = Hardware,
        out: str = out_dir("edgeconv-out", "Output directory (with --to/--hw all: one subdirectory per target)."),
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
        fp16_weights: bool = typer.Option(False, "--fp16-weights", help="Store weights as float16."),
        keep_nchw_io: bool = typer.Option(False, "--keep-nchw-io", help="TFLite: keep NCHW model inputs/outputs."),
        retrain_hook: str | None = typer.Option(None, "--retrain-hook", metavar="MODULE:FUNCTION", help="pkg.module:function that fine-tunes architecture changes: called with the replacement blocks (an nn.ModuleDict) and returns them fitted."),
        custom_op: list[str] | None = typer.Option(None, "--custom-op", metavar="OP", help="Force an op type to become a custom layer (repeatable)."),
        inputs: str | None = VerifyInputs,
        atol: float | None = Atol,
        rtol: float | None = Rtol,
        tolerances: str | None = Tolerances,
        seed: int = Seed,
        input_range: list[str] | None = InputRange,
        no_verify: bool = typer.Option(False, "--no-verify", help="Skip the numerical verification."),
        runtime: list[str] | None = Runtime,
        quantize: str | None = Quantize,
        calibration: str | None = Calibration,
        calibration_method: str = CalibrationMethod,
        per_tensor: bool = PerTensor,
        no_bias_correction: bool = NoBiasCorrection,
        preprocess: str | None = Preprocess,
        json_out: bool = Json,
        jobs: int = typer.Option(1, "-j", "--jobs", min=1, metavar="N", help="With several targets: port up to N at once (one load, shared reference outputs)."),
    ) -> int:
        """Convert a model for a framework × hardware, legalize it, export real files and verify them."""
        from ...frontend.source_kinds import loads_in_child

        runs_no_model = no_verify and quantize is None and calibration is None
        if runs_no_model or loads_in_child(source.path):  # converter/infra/blas.py
            from ...infra.blas import import_numpy_single_threaded

            import_numpy_single_threaded()
        import shlex
        import sys

        from ...port import PortRequest, PortSession
        from ...port.request import LegalizeSpec
        from ...quantize.modes import QuantRequest
        from ...targets.oracles import parse_runtime_flags
        from ...targets.base import ExportOptions
        from ...verify.spec import VerifySpec
        from .port_run import run_ports
        from ...frontend.declared_inputs import parse_range_flags

        request = PortRequest(
            source=source, matrix=matrix,
            verify=None if no_verify else VerifySpec(inputs, atol, rtol, tolerances, seed,
                                                          ranges=parse_range_flags(input_range)),
            quant=QuantRequest(quantize, calibration, calibration_method, per_tensor, preprocess,
                               bias_correction=not no_bias_correction),
            legalize=LegalizeSpec(retrain_hook, tuple(custom_op or ())),
            export=ExportOptions(fp16_weights=fp16_weights, keep_nchw_io=keep_nchw_io),
            runtimes=parse_runtime_flags(runtime), command_line="edgeconv " + shlex.join(sys.argv[1:]))
        with PortSession.open(request) as session:
            return run_ports(session, session.resolve(to, hw), out, json_out, jobs)
