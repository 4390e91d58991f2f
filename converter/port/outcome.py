"""A port's outcome -- status, reason, exit code -- decided in one pure function.

The stages of a port (:mod:`.pair`) record what they found as :class:`StageFacts`; nothing
else sets a status.  :func:`decide` reads the facts in the order that makes the most specific
cause win, and ``tests/test_port_outcome.py`` checks it as a table.

====================  ====  ===============================================================
status                exit  meaning
====================  ====  ===============================================================
``ok``                0     files written and verified by the named oracle
``unsupported``       3     some node has no remedy here, or the exporter cannot express one
``verify_failed``     4     files written, outputs differ beyond tolerance (or the real
                            runtime refused the file)
``needs_custom``      7     files written, but they carry custom layers nobody implemented
``unverified``        8     files written, nothing judged them (a reader that cannot run the
                            file, or no reference to compare with)
====================  ====  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import EXIT_NEEDS_CUSTOM, EXIT_OK, EXIT_UNSUPPORTED, EXIT_UNVERIFIED, EXIT_VERIFY_FAILED

STATUS_EXIT = {"ok": EXIT_OK, "unsupported": EXIT_UNSUPPORTED, "verify_failed": EXIT_VERIFY_FAILED,
               "needs_custom": EXIT_NEEDS_CUSTOM, "unverified": EXIT_UNVERIFIED}


@dataclass(frozen=True)
class StageFacts:
    """What the stages of one port found (each field set by the stage named in its comment)."""

    framework: str = ""
    hw: str = ""
    #: legalize: one reason per node that got no remedy at all.
    unresolved: tuple[str, ...] = ()
    #: legalize: nodes that became custom layers (sorted).
    custom_nodes: tuple[str, ...] = ()
    #: the target: can its format carry custom layers (CoreML ML Programs cannot)?
    custom_layers: bool = True
    #: export: the exporter could not express a node the matrix allowed.
    export_error: str | None = None
    #: verify: the verdict (None: verification did not run).
    verify_ok: bool | None = None
    verify_summary: str = ""
    #: verify: why the target stage is unverified (a reader that cannot run the file).
    unverified_reason: str | None = None
    #: verify: it could not run at all (no reference: onnxruntime cannot load or run the model).
    not_verified: str | None = None
    #: legalize: why an architecture change makes the outputs differ (appended to a failure).
    retrain_note: str = ""
    #: quantize/verify: the integer file's judgement, (status, reason) when not ok.
    file_problem: tuple[str, str] | None = None
    #: quantize: (status, reason) when the quantized model fails or is not exported natively.
    quant_problem: tuple[str, str] | None = None
    #: quantize: the export is a float file, but the hardware loads integer models only.
    float_file_on_integer_hw: bool = False


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str
    #: Remove the exported files (a float file the hardware cannot load is never shipped).
    drop_artifact: bool = False

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.status]


def decide(f: StageFacts) -> Outcome:
    """The outcome of a port whose stages found ``f``."""
    status, reason = _before_verification(f)
    if status == "ok":
        status, reason = _verification(f)
    if status == "ok" and f.custom_nodes:
        n = len(f.custom_nodes)
        status, reason = "needs_custom", (
            f"needs custom kernels: {n} op{'s' if n != 1 else ''} ({', '.join(f.custom_nodes)}); implement them "
            "from custom/ (each has a harness) before shipping" + (f"; {reason}" if reason else ""))
    if status == "ok" and f.quant_problem is not None:
        status, reason = f.quant_problem
    if status == "unsupported" and f.float_file_on_integer_hw:
        return Outcome(status, reason + f"; no {f.framework} file was written: {f.hw} cannot load a float model",
                       drop_artifact=True)
    return Outcome(status, reason)


def _before_verification(f: StageFacts) -> tuple[str, str]:
    if f.unresolved:
        return "unsupported", "; ".join(f.unresolved)
    if f.custom_nodes and not f.custom_layers:
        return "unsupported", (f"{f.framework} has no custom layers for ML Programs; nodes needing one: "
                               f"{', '.join(f.custom_nodes)} (see custom/ for the composite-op path)")
    if f.export_error is not None:
        return "unsupported", f"export: {f.export_error}"
    return "ok", ""


def _verification(f: StageFacts) -> tuple[str, str]:
    if f.not_verified is not None:
        # Without a reference there is no verdict: the files are written, nothing judged them.
        reason = f"not verified: {f.not_verified}"
        return ("ok", reason) if f.custom_nodes else ("unverified", reason)
    if f.verify_ok is False:
        return "verify_failed", f.verify_summary + f.retrain_note
    if f.verify_ok and f.unverified_reason is not None and not f.custom_nodes:
        return "unverified", f.unverified_reason
    if f.file_problem is not None:
        return f.file_problem
    return "ok", ""
