"""Per layer: the exported quantized file against its QDQ reference (ML-EXray's third bug class).

:mod:`.debug` names the layers where *quantization* loses accuracy (QDQ model vs float).  This
names the layers where *the file* loses more than its QDQ model did: a quantized kernel that
misbehaves, or an export that encodes a tensor differently (a scale the kernel requires, a
requantization).  Every tensor the target exposes (``target.intermediates``: LiteRT with
preserved tensors, read back as real values; the TNN reader; ...) is compared with the float
model's tensor by SQNR, and so is the QDQ model's; a row's **gap** is QDQ SQNR minus file SQNR
(median over a few samples).  The summary names the row with the largest gap when it exceeds
:data:`GAP_DB`, with the file's layer type and name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..verify import metrics
from ..verify.localize import expose_intermediates
from ..runtimes.onnxruntime import run_session, session
from .params import QdqView

#: A file that loses this much more than its QDQ model at a tensor is named (half a bit).
GAP_DB = 3.0
SAMPLES = 4


@dataclass
class FileRow:
    tensor: str
    layer_type: str
    layer_name: str
    file_sqnr_db: float
    qdq_sqnr_db: float | None

    @property
    def gap_db(self) -> float | None:
        return None if self.qdq_sqnr_db is None else self.qdq_sqnr_db - self.file_sqnr_db

    def to_dict(self) -> dict:
        return {**self.__dict__, "gap_db": self.gap_db}


def file_layers(float_model: onnx.ModelProto, qdq_model: onnx.ModelProto, target, artifact,
                samples: list[dict[str, np.ndarray]]) -> dict | None:
    """``{"rows": [...], "summary": str, "worst": row | None}``; None when the target exposes no
    intermediate tensors."""
    if not callable(getattr(target, "intermediates", None)):
        return None
    view = QdqView(float_model, qdq_model)
    float_exposed, order = expose_intermediates(float_model)
    qdq_exposed, _ = expose_intermediates(qdq_model)
    float_session, qdq_session = session(float_exposed), session(qdq_exposed)
    file_sqnr: dict[str, list[float]] = {}
    qdq_sqnr: dict[str, list[float]] = {}
    names: dict[str, tuple[str, str]] = {}
    for sample in samples[:SAMPLES]:
        ref = run_session(float_session, sample)
        qdq = run_session(qdq_session, sample)
        got = target.intermediates(artifact, sample)
        for name, value in got.items():
            want = ref.get(name)
            if want is None or np.shape(want) != np.shape(value) or not np.issubdtype(np.asarray(want).dtype,
                                                                                      np.floating):
                continue
            file_sqnr.setdefault(name, []).append(metrics.sqnr_db(want, value))
            names[name] = (got.layer_types.get(name, ""), got.layer_names.get(name, ""))
            carrier = view.quantized_view(name)
            if carrier is not None and carrier in qdq:
                qdq_sqnr.setdefault(name, []).append(metrics.sqnr_db(want, qdq[carrier]))
    rows = [FileRow(name, *names[name], float(np.median(file_sqnr[name])),
                    float(np.median(qdq_sqnr[name])) if name in qdq_sqnr else None)
            for name in order if name in file_sqnr]
    gaps = [r for r in rows if r.gap_db is not None and np.isfinite(r.gap_db)]
    worst = max(gaps, key=lambda r: r.gap_db, default=None)
    if worst is not None and worst.gap_db > GAP_DB:
        summary = (f"the file loses {worst.gap_db:.1f} dB more than its QDQ model at '{worst.tensor}' "
                   f"({worst.layer_type} {worst.layer_name}: {worst.file_sqnr_db:.1f} dB vs {worst.qdq_sqnr_db:.1f} dB)")
    else:
        summary = (f"the file tracks its QDQ model layer by layer ({len(rows)} tensors, largest gap "
                   f"{(worst.gap_db if worst is not None else 0.0):.1f} dB)")
    return {"rows": [r.to_dict() for r in rows], "summary": summary,
            "worst": worst.to_dict() if worst is not None else None}
