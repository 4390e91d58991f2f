"""The outcome of a port (status, reason, exit code) as a table over the stages' facts
(converter/port/outcome.py): each row is one situation a port can end in."""

from __future__ import annotations

import pytest

from converter.port.outcome import Outcome, StageFacts, decide

ROWS = [
    # (what the stages found, status, exit code, reason starts with)
    (StageFacts(), "ok", 0, ""),
    (StageFacts(verify_ok=True), "ok", 0, ""),
    (StageFacts(unresolved=("n1 (Foo): no rule",)), "unsupported", 3, "n1 (Foo): no rule"),
    (StageFacts(unresolved=("a", "b")), "unsupported", 3, "a; b"),
    (StageFacts(framework="coreml", custom_nodes=("g",), custom_layers=False), "unsupported", 3,
     "coreml has no custom layers for ML Programs; nodes needing one: g"),
    (StageFacts(export_error="rank 6 Transpose"), "unsupported", 3, "export: rank 6 Transpose"),
    (StageFacts(verify_ok=False, verify_summary="target:tnn differs"), "verify_failed", 4, "target:tnn differs"),
    (StageFacts(verify_ok=False, verify_summary="x", retrain_note="; expected of an architecture change"),
     "verify_failed", 4, "x; expected of an architecture change"),
    (StageFacts(verify_ok=True, unverified_reason="reader could not run it"), "unverified", 8,
     "reader could not run it"),
    # no reference (onnxruntime cannot run the model): never ok
    (StageFacts(not_verified="onnxruntime cannot load the model: bad Pad"), "unverified", 8,
     "not verified: onnxruntime cannot load the model"),
    (StageFacts(verify_ok=True, custom_nodes=("c",)), "needs_custom", 7, "needs custom kernels: 1 op (c)"),
    (StageFacts(verify_ok=True, custom_nodes=("c", "d"), unverified_reason="skipped"), "needs_custom", 7,
     "needs custom kernels: 2 ops (c, d)"),
    (StageFacts(not_verified="no value for x", custom_nodes=("c",)), "needs_custom", 7,
     "needs custom kernels: 1 op (c); implement them from custom/ (each has a harness) before shipping; not verified"),
    (StageFacts(verify_ok=True, file_problem=("verify_failed", "int8 file: SQNR 12 dB")), "verify_failed", 4,
     "int8 file: SQNR 12 dB"),
    (StageFacts(verify_ok=True, file_problem=("unverified", "reader only")), "unverified", 8, "reader only"),
    (StageFacts(verify_ok=True, quant_problem=("verify_failed", "SQNR 9 dB < 25")), "verify_failed", 4,
     "SQNR 9 dB < 25"),
    (StageFacts(quant_problem=("unsupported", "native uint8 export not implemented")), "unsupported", 3,
     "native uint8 export not implemented"),
    # the most specific cause wins: an unresolved node before a quantization problem
    (StageFacts(unresolved=("n",), quant_problem=("verify_failed", "q")), "unsupported", 3, "n"),
    (StageFacts(verify_ok=False, verify_summary="v", quant_problem=("verify_failed", "q")), "verify_failed", 4, "v"),
]


@pytest.mark.parametrize("facts, status, code, reason", ROWS)
def test_outcome_table(facts, status, code, reason):
    outcome = decide(facts)
    assert (outcome.status, outcome.exit_code) == (status, code)
    assert outcome.reason.startswith(reason), outcome.reason
    assert outcome.drop_artifact is False


def test_a_float_file_for_integer_only_hardware_is_never_shipped():
    facts = StageFacts(framework="tflite", hw="edgetpu", quant_problem=("unsupported", "native int8 export not "
                                                                        "implemented"), float_file_on_integer_hw=True)
    assert decide(facts) == Outcome("unsupported", "native int8 export not implemented; no tflite file was written: "
                                    "edgetpu cannot load a float model", drop_artifact=True)
    # float-capable hardware keeps the file (and a port that is ok keeps it too)
    assert not decide(StageFacts(quant_problem=("unsupported", "x"))).drop_artifact
    assert not decide(StageFacts(float_file_on_integer_hw=True)).drop_artifact
