"""``edgeconv normalize MODEL -o OUT.onnx``: canonical ONNX, checked against the input model."""

from __future__ import annotations

import typer

from .options import Json, ModelSource, model_options, out_file


def register(app: typer.Typer) -> None:
    @app.command("normalize", short_help="Canonical ONNX (opset 17), checked against the input.")
    @model_options()
    def normalize_cmd(
        out: str = out_file(..., "Where to write the normalized .onnx."),
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        seed: int = typer.Option(0, "--seed", help="Seed for the equivalence check's random inputs."),
        json_out: bool = Json,
    ) -> None:
        """Convert to canonical ONNX (opset 17, shapes, folded constants, stable names)."""
        import json

        from ...ir.onnx_file import save_onnx
        from ...frontend.normalize import check_equivalent, normalize
        from ...ir.graph import op_histogram

        shapes = dict(source.input_shapes)
        original = source.load()
        if "" in shapes:
            shapes[original.graph.input[0].name] = shapes.pop("")
        result = normalize(original, shapes or None)
        from ...ir.memory import check_memory

        check_memory(result, source.max_memory, "the equivalence check")
        max_err = check_equivalent(original, result, shapes or None, seed=seed)
        save_onnx(result, out)
        info = {
            "output": out,
            "nodes_before": len(original.graph.node),
            "nodes_after": len(result.graph.node),
            "ops_after": op_histogram(result),
            "max_abs_error": max_err,
        }
        if json_out:
            print(json.dumps(info, indent=2))
        else:
            err = "n/a (dynamic shapes)" if max_err is None else f"{max_err:.3g}"
            print(f"wrote {out}: {info['nodes_before']} -> {info['nodes_after']} nodes, max abs error vs input {err}")
