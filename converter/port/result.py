"""What a port returns: one :class:`PortResult` per framework x hardware."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .outcome import STATUS_EXIT


@dataclass
class PortResult:
    target: str
    hw: str
    status: str
    reason: str
    out_dir: Path
    files: list[str]
    timings: dict[str, float]
    report: dict[str, Any]
    #: The verify package's report object (tables, HTML chart), when verification ran.
    verification: Any = None
    #: The name of what judged the target stage ("TNN x86 runtime (tnn_run)", "LiteRT 2.3.0").
    oracle: str = ""
    #: With several targets, a port that could not run at all (bad input for this target, an
    #: internal error): the error, and ``status`` is "error".  A single port raises it instead.
    error: Exception | None = None

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return getattr(self.error, "exit_code", 70)
        return STATUS_EXIT[self.status]

    @classmethod
    def failed(cls, target: str, hw: str, out_dir: Path, error: Exception) -> PortResult:
        return cls(target, hw, "error", str(error), out_dir, [], {}, {}, error=error)

    def to_json(self) -> dict:
        """The summary ``port --json`` prints per target (with a quantized port's row of
        :mod:`converter.quantize.per_target`)."""
        out = {"target": self.target, "hw": self.hw, "status": self.status, "exit_code": self.exit_code,
               "reason": self.reason, "oracle": self.oracle, "out_dir": str(self.out_dir), "files": self.files,
               "timings": self.timings}
        if self.report.get("quantization"):
            from ..quantize.per_target import target_row

            out["quantization"] = target_row(self.target, self.hw, self.report).to_dict()
        return out
