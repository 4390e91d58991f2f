"""Batch conversion for model-release pipelines: a manifest of models × targets × hardware.

``run_batch(manifest_path, out_dir, jobs=N)`` validates the manifest, skips jobs whose content
hash is unchanged, runs the rest in worker processes (or on a Ray cluster), and writes
``batch-summary.json``, ``junit.xml`` and ``index.html``.
"""

from .manifest import Job, Manifest, load_manifest  # noqa: F401
from .runner import BatchResult, run_batch  # noqa: F401
