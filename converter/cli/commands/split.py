"""``edgeconv split MODEL --to T --hw H -o DIR``: move trailing unsupported ops into post-processing.

Writes ``DIR/model.onnx`` (the cut model: legal on the target up to the boundary) and
``DIR/postproc/{postprocess.py, postprocess.hpp, manifest.json}``; nothing when the split is
refused (exit 3, one line naming the node and op that cannot move).
"""

from __future__ import annotations

import re

import typer

from .options import (MatrixSource, ModelSource, OneFramework, OneHardware, Json, matrix_options,
                      model_options, out_dir)

# A C++ namespace, possibly nested (a::b); the generated header must compile.
_CPP_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*")


def register(app: typer.Typer) -> None:
    @app.command("split", short_help="Move trailing unsupported ops into generated post-processing.")
    @model_options()
    @matrix_options()
    def split_cmd(
        to: str = OneFramework,
        hw: str | None = OneHardware,
        out: str = out_dir(..., "Output directory: model.onnx and postproc/."),
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
        move: list[str] | None = typer.Option(None, "--move", metavar="NODE",
                                                 help="Also move this node (repeatable)."),
        max_outputs: int | None = typer.Option(
            None, "--max-outputs", min=1, metavar="N",
            help="Merge the cut model's outputs beyond this many (default: the matrix's)."),
        namespace: str = typer.Option("edgeconv_postproc", "--cpp-namespace", metavar="NAME",
                                      help="C++ namespace of the generated header."),
        json_out: bool = Json,
    ) -> None:
        """Cut trailing unsupported ops out of the model and generate Python/C++ post-processing."""
        import json
        from pathlib import Path

        from ...errors import BadInput
        from ...infra.outdirs import check_output_dir, replace_output_dir
        from ...ir.graph import to_graph
        from ...ir.onnx_file import save_onnx
        from ...postproc import split

        if not _CPP_NAMESPACE.fullmatch(namespace):
            raise BadInput(f"--cpp-namespace '{namespace}': not a C++ namespace name (letters, digits, _ and ::)")
        out = check_output_dir(out)  # before any work: a directory edgeconv may replace
        m = matrix.load()
        from ...port.resolve import resolve_one

        framework, hardware = resolve_one(m, to, hw)
        onnx_model = source.normalized(require_static=False)
        graph = to_graph(onnx_model)
        must_move = {n.name for n in graph.nodes if not m.check_node(n, framework, hardware).supported}
        unknown = sorted(set(move or ()) - {n.name for n in graph.nodes})
        if unknown:
            raise BadInput(f"--move {unknown[0]}: no such node (node names are the normalized ones: "
                           f"see `edgeconv plan --all-nodes`)")
        must_move |= set(move or ())
        limit = max_outputs if max_outputs is not None else m.properties(framework, hardware).get("max_outputs")
        result = split(onnx_model, must_move, limit, cpp_namespace=namespace,
                       title=Path(source.path).stem)
        with replace_output_dir(out) as tmp:
            save_onnx(result.model, tmp / "model.onnx")
            for name, text in result.files.items():
                (tmp / "postproc" / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp / "postproc" / name).write_text(text, encoding="utf-8")
        summary = {
            "target": framework, "hw": hardware, "max_outputs": limit,
            "moved_nodes": result.cut.moved_nodes, "boundary": result.cut.boundary,
            "merged": result.manifest["merged"] is not None,
            "files": ["model.onnx"] + [f"postproc/{n}" for n in result.files],
        }
        if json_out:
            print(json.dumps(summary, indent=2))
            return
        if not must_move:
            print(f"every node is supported on {framework}/{hardware}: nothing moved")
        else:
            print(f"moved {len(result.cut.moved_nodes)} node(s) to post-processing: {', '.join(result.cut.moved_nodes)}")
            merged = " (merged into one)" if summary["merged"] else ""
            print(f"cut model outputs{merged}: {', '.join(result.cut.boundary)}")
        print(f"wrote {out}/: " + ", ".join(summary["files"]))
