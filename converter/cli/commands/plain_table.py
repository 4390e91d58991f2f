"""rich's boxed two-column table, written without rich when rich would write plain text anyway.

On a pipe or a file rich draws no colors and no live display, and a table whose cells fit the
width is only box characters and padded cells: exactly what :func:`render` writes.  Loading rich
to write it costs ~0.02 s of a 0.3 s ``edgeconv port``; :func:`plain_width` says when the output
is such a case, :func:`fits` when the cells are (printable text that rich lays out without
wrapping or escaping).  tests/test_port_summary.py compares the two byte for byte.
"""

from __future__ import annotations

import os
import sys

#: Non-ASCII characters edgeconv's own labels use; each is one terminal cell wide.
_ONE_CELL = frozenset("→×")


def plain_width(stream) -> int | None:
    """The width rich's :func:`~converter.cli.commands.options.stdout_console` lays ``stream`` out at
    when it writes plain text there (not a terminal, no forced colors, UTF-8), else None."""
    if "COLUMNS" in os.environ or not hasattr(stream, "isatty") or not not_a_terminal(stream):
        return None
    if not (getattr(stream, "encoding", None) or "utf-8").lower().startswith("utf"):
        return None
    return 200


def not_a_terminal(stream) -> bool:
    """Whether rich would see ``stream`` as no terminal (so draws no spinner on it)."""
    env = os.environ
    if env.get("TTY_COMPATIBLE") == "1" or env.get("FORCE_COLOR"):
        return False
    if any(name in sys.modules for name in ("IPython", "idlelib")):  # rich's Jupyter / IDLE cases
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return True


def _plain_line(line: str) -> bool:
    return bool(line) and line == line.strip() and all(
        (ch.isascii() and ch.isprintable()) or ch in _ONE_CELL for ch in line)


def fits(header: str, rows: list[tuple[str, str]], width: int) -> bool:
    """Whether rich writes ``header`` and the table of ``rows`` unwrapped at ``width``: printable
    one-cell characters, no markup brackets, no blank or padded line, nothing too wide."""
    lines = [header] + [part for row in rows for cell in row for part in cell.split("\n")]
    if not all(_plain_line(line) and "[" not in line for line in lines) or len(header) > width:
        return False
    left = max(len(line) for label, _ in rows for line in label.split("\n"))
    right = max(len(line) for _, value in rows for line in value.split("\n"))
    return left + right + 7 <= width


def render(header: str, rows: list[tuple[str, str]]) -> str:
    """``header``, then the rows in a box: what rich's ``Table(show_header=False)`` prints."""
    left = max(len(line) for label, _ in rows for line in label.split("\n"))
    right = max(len(line) for _, value in rows for line in value.split("\n"))
    out = [header, f"┌{'─' * (left + 2)}┬{'─' * (right + 2)}┐"]
    for label, value in rows:
        labels, values = label.split("\n"), value.split("\n")
        for i in range(max(len(labels), len(values))):
            a = labels[i] if i < len(labels) else ""
            b = values[i] if i < len(values) else ""
            out.append(f"│ {a.ljust(left)} │ {b.ljust(right)} │")
    out.append(f"└{'─' * (left + 2)}┴{'─' * (right + 2)}┘")
    return "\n".join(out) + "\n"
