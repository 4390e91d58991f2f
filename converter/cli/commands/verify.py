"""``edgeconv verify ORIGINAL CONVERTED``: do two ONNX models compute the same thing, and if not,
where does the converted one start to differ?"""

from __future__ import annotations


import typer

from .options import (Atol, InputRange, Json, Rtol, Runtime, Seed, ShapeList, Tolerances, VerifyInputs, out_dir,
                      stdout_console)


def register(app: typer.Typer) -> None:
    @app.command("verify", short_help="Do two ONNX models compute the same; where do they diverge?")
    def verify_cmd(
        original: str = typer.Argument(..., metavar="ORIGINAL", help="The reference ONNX model."),
        converted: str = typer.Argument(..., metavar="CONVERTED", help="The converted ONNX model to check against it, "
                                        "or an exported file (.tnnproto, MACE .pb, .tflite, .mlpackage) in a port's "
                                        "output directory (its report.json says how to run it)."),
        inputs: str | None = VerifyInputs,
        atol: float | None = Atol,
        rtol: float | None = Rtol,
        layer_tol: float | None = typer.Option(None, "--layer-tol", help="Per-layer normalized rMSE above which a layer diverges (default 1e-3)."),
        tolerances: str | None = Tolerances,
        seed: int = Seed,
        samples: int = typer.Option(1, "--samples", help="Number of random input samples."),
        value_range: list[str] | None = InputRange,
        input_shape: ShapeList = typer.Option(
            None, "--input-shape", "-s", metavar="[NAME=]SHAPE[:DTYPE]",
            help="Shape of a dynamic input for the random inputs, e.g. input=1x3x224x224 (repeatable; a :DTYPE "
                 "suffix must match the model's)."),
        out: str | None = out_dir(None, "Write verify.json, verify.html and, on failure, the replay files here "
                                           "(default on failure: <CONVERTED>.verify/)."),
        preprocess: str | None = typer.Option(
            None, "--preprocess", metavar="SPEC",
            help="With --inputs: warn when the inputs do not look preprocessed as SPEC says (range, swapped "
                 "channel order); the spec format is port's."),
        max_memory: str | None = typer.Option(
            None, "--max-memory", metavar="SIZE",
            help="Refuse (exit 2) models whose inference needs more, e.g. 8G. Default: half the RAM."),
        runtime: list[str] | None = Runtime,
        timeout: float = typer.Option(600.0, "--timeout", metavar="SECONDS", min=0,
                                      help="Stop an inference or a --runtime tool (with every process it started) "
                                           "after this long (exit 9); 0: no limit."),
        json_out: bool = Json,
    ) -> None:
        """Compare CONVERTED with ORIGINAL on seeded or given inputs; name the first diverging layer."""
        import json
        from pathlib import Path

        from ...errors import VerificationFailed
        from ...verify import load_tolerances, verify_files
        from ...infra.outdirs import check_output_dir
        from ...infra.limits import set_time_limit
        from ...frontend.declared_inputs import parse_input_flags, parse_range_flags
        from ...verify.report import print_report, to_json

        if out:
            check_output_dir(out)  # before any work: new, empty or edgeconv's
        set_time_limit(timeout)
        tols = load_tolerances(tolerances, atol=atol, rtol=rtol, layer_rmse=layer_tol)
        if preprocess:
            _check_preprocessing(original, inputs, preprocess)
        ranges = parse_range_flags(value_range)
        shapes, dtypes = parse_input_flags(input_shape)
        if dtypes:
            _check_dtypes(original, dtypes)
        _check_memory(original, shapes, max_memory)
        from ...targets.oracles import parse_runtime_flags, validate
        from ...verify.pipeline import TARGET_FILES, verify_target_file

        chosen = parse_runtime_flags(runtime)
        validate(chosen)
        if Path(converted).suffix.lower() in TARGET_FILES:
            report = verify_target_file(original, converted, tols, inputs_npz=inputs, seed=seed, runtimes=chosen,
                                        ranges=ranges)
        else:
            report = verify_files(original, converted, tols, inputs_npz=inputs, seed=seed,
                                  ranges=ranges, samples=samples, shapes=shapes or None)
        _write_verify_dir(report, out, original, converted, tolerances, chosen)
        if json_out:
            print(json.dumps(to_json(report), indent=2, sort_keys=True, allow_nan=False))
        else:
            print_report(report, stdout_console())
        if not report.ok:
            raise VerificationFailed(report.summary())



def _write_verify_dir(report, out: str | None, original: str, converted: str, tolerances, runtimes) -> None:
    """verify.json/html (and on failure the replay files) in ``-o`` or, on failure only,
    ``<CONVERTED>.verify/``: a directory of edgeconv's own, replaced as a whole."""
    from pathlib import Path

    from ...infra.outdirs import replace_output_dir
    from ...verify.pipeline import write_outputs
    from ...verify.replay import write_replay

    target_dir = Path(out) if out else None
    if not report.ok:
        target_dir = target_dir or Path(converted).with_name(Path(converted).stem + ".verify")
    if target_dir is None:
        return
    with replace_output_dir(target_dir) as tmp:
        if not report.ok:
            write_replay(report, tmp, original, converted, tolerances, shown_dir=target_dir, runtimes=runtimes)
        write_outputs(report, tmp)


def _check_preprocessing(original: str, inputs: str | None, spec_text: str) -> None:
    """One ``edgeconv: warning:`` line per way the --inputs contradict the spec."""
    import sys

    from ...errors import BadInput
    from ...frontend.load import load_model
    from ...quantize.input_checks import check_inputs
    from ...quantize.preprocess import bind, parse_spec
    from ...runtimes.feeds import load_npz

    spec = parse_spec(spec_text)
    if inputs is None:
        raise BadInput("--preprocess checks given inputs: add --inputs data.npz")
    model = load_model(original)
    for line in check_inputs(load_npz(inputs, model), bind(spec, model), f"--inputs {inputs}"):
        print(f"edgeconv: warning: {line}", file=sys.stderr)


def _check_dtypes(path: str, dtypes: dict) -> None:
    """A ``-s NAME=SHAPE:DTYPE`` whose type is not the model's is one line."""
    from pathlib import Path

    from ...frontend.declared_inputs import check_declared
    from ...frontend.load import load_onnx

    if Path(path).is_file():  # verify_files says it when the file is missing
        check_declared(load_onnx(Path(path)), dtypes, {}, path)


def _check_memory(path: str, shapes: dict, max_memory: str | None) -> None:
    """Refuse before any allocation when running the reference would need more than
    --max-memory (``-s 1x3x99999x99999`` was an internal MemoryError)."""
    import onnx

    from ...ir.memory import check_memory, parse_size

    limit = parse_size(max_memory) if max_memory else None
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - verify_files reports an unreadable model in its own words
        return
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    for position, value in enumerate(inputs):
        shape = shapes.get(value.name) or (shapes.get("") if position == 0 else None)
        if shape and len(shape) == len(value.type.tensor_type.shape.dim):
            for dim, size in zip(value.type.tensor_type.shape.dim, shape):
                dim.dim_value = size
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - the interface shapes alone still count
        pass
    check_memory(model, limit, "running the models")
