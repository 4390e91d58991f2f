"""Rich tables that close ``edgeconv port``: what changed, what was written, whether it matches."""

from __future__ import annotations

from collections import Counter

_STATUS_STYLE = {"ok": "green", "unsupported": "yellow", "verify_failed": "red", "needs_custom": "yellow",
                 "unverified": "yellow"}


def print_one(console, result) -> None:
    """The summary of one port; ``console`` None: stdout, through rich unless rich would write
    plain text there anyway (converter/cli/commands/plain_table.py)."""
    header, rows = _summary(result)
    if console is None:
        import sys

        from .plain_table import fits, plain_width, render

        width = plain_width(sys.stdout)
        if width is not None and result.verification is None and fits(header, rows, width):
            sys.stdout.write(render(header, rows))
            return
        from .options import stdout_console

        console = stdout_console()
    from rich.markup import escape  # model, op, file names and reasons are user text, never markup
    from rich.table import Table

    console.print(escape(header), highlight=False)
    table = Table(show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    for label, value in rows:
        if label == "result":
            style = _STATUS_STYLE.get(result.status, "red")
            value = f"[{style}]{result.status}[/]" + escape(value[len(result.status):])
        else:
            value = escape(value)
        table.add_row(label, value)
    console.print(table)
    if result.verification is not None:
        from ...verify.report import print_report

        print_report(result.verification, console)


def _summary(result) -> tuple[str, list[tuple[str, str]]]:
    """(the line naming model and target, the table's rows as plain text)."""
    rep = result.report
    rows = []
    before, after = rep.get("ops_before", {}), rep.get("ops_after", {})
    rows.append(("ops before", _hist(before)))
    rows.append(("ops after", _hist(after)))
    remedies = Counter(e.get("remedy") for e in rep.get("plan", {}).get("entries", []))
    remedies.pop("supported", None)
    rows.append(("remedies", ", ".join(f"{k}: {v}" for k, v in sorted(remedies.items())) or "none needed"))
    partitions = rep.get("plan", {}).get("partitions")
    if partitions:
        rows.append(("partitions", partitions["summary"]))
    for entry in rep.get("plan", {}).get("may_stay_on_cpu", []):
        from ...legalize.partition import compiler_summary

        rows.append(("may run on CPU", compiler_summary(entry)))
    rules = Counter(a["rule"] for a in rep.get("applied_rules", []))
    if rules:
        rows.append(("rules applied", ", ".join(f"{k} ×{v}" for k, v in sorted(rules.items()))))
    if rep.get("quantization"):
        from ...quantize.report import summary_line

        rows.append(("quantization", summary_line(rep["quantization"])))
    rows.append(("files", "\n".join(result.files)))
    rows.append(("timings", ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())))
    if getattr(result, "oracle", ""):
        rows.append(("judged by", result.oracle))
    rows.append(("result", result.status + (f": {result.reason}" if result.reason else "")))
    return f"{rep['model']} → {result.target}/{result.hw}", rows


def print_many(console, results, failures) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.print("Where can this model run?")
    table = Table()
    for col in ("framework", "hardware", "result", "judged by", "remedies", "why not"):
        table.add_column(col, overflow="fold")
    for r in results:
        remedies = Counter(e.get("remedy") for e in r.report.get("plan", {}).get("entries", []))
        remedies.pop("supported", None)
        style = _STATUS_STYLE.get(r.status, "red")
        partitions = r.report.get("plan", {}).get("partitions")
        split = f"\n{partitions['accelerator_partitions']} {r.hw} partition(s), {partitions['mac_share']:.0%} of MACs" \
            if partitions else ""
        table.add_row(escape(r.target), escape(r.hw), f"[{style}]{r.status}[/]", escape(getattr(r, "oracle", "") or "-"),
                      escape((", ".join(f"{k}: {v}" for k, v in sorted(remedies.items())) or "-") + split),
                      escape(r.reason))
    for fw, hw, err in failures:
        table.add_row(escape(fw), escape(hw), "[red]error[/]", "-", "-", escape(str(err)))
    console.print(table)
    ok = sum(r.status == "ok" for r in results)
    console.print(f"{ok} of {len(results) + len(failures)} framework × hardware combinations work.")
    if any(r.report.get("quantization") for r in results):
        print_quantization(console, results)


def print_quantization(console, results) -> None:
    """Per framework x hardware: the precision chosen, SQNR (on which samples, computed by what),
    top-1 agreement, size, latency (:mod:`converter.quantize.per_target`)."""
    from rich.markup import escape
    from rich.table import Table

    from ...quantize.per_target import HEADER, cells, target_row

    console.print("Quantization per target:")
    table = Table()
    for col in HEADER:
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(*(escape(c) for c in cells(target_row(r.target, r.hw, r.report))))
    console.print(table)
    from ...quantize.report import auto_line

    for r in results:  # what auto chose there, and why
        if auto_line(r.report.get("quantization") or {}):
            console.print(escape(f"{r.target}/{r.hw} auto: {auto_line(r.report['quantization'])}"), highlight=False)


def _hist(hist: dict) -> str:
    total = sum(hist.values())
    return f"{total} nodes: " + ", ".join(f"{op} {n}" for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
