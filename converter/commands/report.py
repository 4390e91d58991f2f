"""``edgeconv report [--model MODEL] -o page.html``: the support matrix as one HTML file.

With ``--model`` the page highlights the model's ops and shows its per-node verdicts for every
framework x hardware side by side: where can this model run, and what blocks it?
"""

from __future__ import annotations

import typer

from .options import InputShape, MatrixOverlay, MatrixPath, ShapeList, TrustPickle


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        out: str = typer.Option("support-matrix.html", "-o", "--out", help="HTML file to write."),
        model: str = typer.Option(None, "--model", help="Also show this model's per-node verdicts."),
        input_shape: ShapeList = InputShape,
        trust_pickle: bool = TrustPickle,
        matrix: str = MatrixPath,
        matrix_overlay: ShapeList = MatrixOverlay,
    ) -> None:
        """Write the op support matrix (and optionally a model's verdicts) as a self-contained HTML page."""
        from ..fsutil import atomic_write_text  # noqa: PLC0415
        from ..matrix import load_matrix  # noqa: PLC0415
        from ..report.matrix_page import build_matrix_page  # noqa: PLC0415

        m = load_matrix(matrix, matrix_overlay or ())
        checks = None
        if model:
            from ..check import check_targets  # noqa: PLC0415
            from .options import load_normalized  # noqa: PLC0415

            onnx_model = load_normalized(model, input_shape, trust_pickle, require_static=False)
            pairs = [(fw, hw) for fw in m.frameworks for hw in m.hardware(fw)]
            checks = check_targets(onnx_model, pairs, m)
        page = build_matrix_page(m, checks, model_name=model)
        atomic_write_text(out, page)
        print(f"wrote {out}")
