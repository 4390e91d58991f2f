"""``edgeconv report [--model MODEL] -o page.html``: the support matrix as one HTML file.

With ``--model`` the page highlights the model's ops and shows its per-node verdicts for every
framework x hardware side by side: where can this model run, and what blocks it?
"""

from __future__ import annotations

import typer

from .options import MatrixSource, ModelSource, matrix_options, model_options, out_file


def register(app: typer.Typer) -> None:
    @app.command("report", short_help="The op support matrix as one self-contained HTML page.")
    @model_options(as_option=True)
    @matrix_options()
    def report_cmd(
        out: str = out_file("support-matrix.html", "HTML file to write."),
        source: ModelSource = None,  # --model, -s, --trust-pickle (see options.model_options)
        matrix: MatrixSource = None,  # --matrix, --matrix-overlay
    ) -> None:
        """Write the op support matrix (and optionally a model's verdicts) as a self-contained HTML page."""
        from ...infra.fsutil import atomic_write_text
        from ...report.matrix_page import build_matrix_page

        m = matrix.load()
        checks = None
        if source.path:
            from ...legalize.check import check_targets

            pairs = [(fw, hw) for fw in m.frameworks for hw in m.hardware(fw)]
            checks = check_targets(source.normalized(require_static=False), pairs, m)
        page = build_matrix_page(m, checks, model_name=source.path)
        atomic_write_text(out, page)
        print(f"wrote {out}")
