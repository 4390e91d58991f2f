"""Quantization: calibrate, quantize to QDQ (or float16), verify against the float model.

Modules (one job each):

* :mod:`.modes`         — which mode a framework x hardware gets (``--quantize``, matrix dtypes)
* :mod:`.calibration`   — ``--calibration SRC`` -> checked feed dicts
* :mod:`.preprocess`    — the ``--preprocess`` spec, image decoding, the numpy reference
* :mod:`.preprocess_graph`, :mod:`.preprocess_fold`, :mod:`.preprocess_code` — the spec as an
  ONNX graph, folded into the model, or generated as ``preprocess.py`` + ``preprocess.hpp``
* :mod:`.input_checks`  — inputs against the spec (range, swapped channel order)
* :mod:`.ranges`        — activation ranges from onnxruntime's calibrators (+ MSE)
* :mod:`.qdq`           — onnxruntime's QDQ quantization, weight-only int8, float16
* :mod:`.params`        — the per-tensor scale/zero-point record (``edgeconv.quant/1``)
* :mod:`.verify`        — quantized vs float outputs: SQNR, cosine, max error, top-1/top-5
* :mod:`.debug`         — the per-layer SQNR table with diagnoses (ML-EXray)
* :mod:`.auto`          — ``--quantize auto`` mixed precision
* :mod:`.port`          — the call ``port`` makes between legalize and export

Heavy imports (onnxruntime.quantization, Pillow) happen inside functions.
"""
