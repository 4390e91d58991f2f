"""The execution boundary (below the targets): :class:`~.base.Runner` and its oracles,
onnxruntime sessions (:mod:`.onnxruntime`), the feeds runners get (:mod:`.feeds`), and the base of
every real framework runtime (:class:`~.base.RealRuntime`; each target brings its own adapter).

Which runner judges a target's files is chosen above the targets (:mod:`converter.targets.oracles`).
"""

from .base import (READER, RUNTIME, Oracle, ReaderCannotRun, RealRuntime, Runner, RuntimeRefused, TargetRunner,
                   locate_binary, onnxruntime_oracle, package_version)

__all__ = ["READER", "RUNTIME", "Oracle", "ReaderCannotRun", "RealRuntime", "Runner", "RuntimeRefused",
           "TargetRunner", "locate_binary", "onnxruntime_oracle", "package_version"]
