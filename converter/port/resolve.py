"""``--to``/``--hw`` words -> (framework, hardware) pairs: the one place they and their defaults
are resolved (``port``, ``check``, ``plan``, ``split``, ``demo``, ``batch`` and the Python API).

Users type the hardware words they know: a unit's own name (``huawei_npu``), an alias (``gpu``),
a class word that names several units of one framework (TNN's ``npu``: huawei_npu, rknpu,
apple_npu -- each of them is ported), or ``all``.  Without ``--hw`` a port goes to each
framework's CPU (the target's ``default_hw``); ``check`` and ``plan`` of ``--to all`` look at
every hardware.
"""

from __future__ import annotations

from ..errors import BadInput


def default_hw(framework: str) -> str:
    """What ``--hw`` means when omitted for one framework: its target's ``default_hw`` (the
    framework's CPU), or ``cpu`` for a matrix framework without an exporter."""
    from .. import targets

    return targets.get(framework).default_hw if framework in targets.names() else "cpu"


def resolve_pairs(matrix, to: str, hw: str | None, *, exporters_only: bool = True,
                  all_hw_by_default: bool = False) -> list[tuple[str, str]]:
    """[(framework, hardware)] for what the user typed.  ``exporters_only``: only frameworks
    edgeconv can write files for (``port``); ``all_hw_by_default``: ``--to all`` without
    ``--hw`` means every hardware (``check``, ``plan``) instead of each framework's CPU."""
    from .. import targets

    every = to.strip().lower() == "all"
    if every:
        frameworks = [fw for fw in targets.names() if fw in matrix.frameworks] if exporters_only else matrix.frameworks
    elif exporters_only:
        frameworks = [to]
        if to not in targets.names():
            raise BadInput(f"unknown framework '{to}' for --to; choose one of: {', '.join(targets.names())}, all")
    else:
        frameworks = [matrix.resolve_framework(to)]
    if hw is None and every and all_hw_by_default:
        hw = "all"
    if hw is None:
        return [(fw, matrix.resolve_hw(fw, default_hw(fw))) for fw in frameworks]
    pairs = [p for p in matrix.resolve_targets(to, hw) if p[0] in frameworks]
    if not pairs:
        raise BadInput(f"no framework has hardware '{hw}'")
    return pairs


def resolve_one(matrix, to: str, hw: str | None) -> tuple[str, str]:
    """The single pair a one-target command (``split``) means; a word naming several is a
    BadInput listing them."""
    framework = matrix.resolve_framework(to)
    return framework, matrix.resolve_hw(framework, hw if hw is not None else default_hw(framework))
