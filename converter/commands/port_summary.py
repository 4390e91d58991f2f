"""Rich tables that close ``edgeconv port``: what changed, what was written, whether it matches."""

from __future__ import annotations

from collections import Counter

from rich.markup import escape  # model, op, file names and reasons are user text, never markup

_STATUS_STYLE = {"ok": "green", "unsupported": "yellow", "verify_failed": "red", "needs_custom": "yellow",
                 "unverified": "yellow"}


def print_one(console, result) -> None:
    from rich.table import Table

    rep = result.report
    console.print(escape(f"{rep['model']} → {result.target}/{result.hw}"), highlight=False)
    table = Table(show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    before, after = rep.get("ops_before", {}), rep.get("ops_after", {})
    table.add_row("ops before", _hist(before))
    table.add_row("ops after", _hist(after))
    remedies = Counter(e.get("remedy") for e in rep.get("plan", {}).get("entries", []))
    remedies.pop("supported", None)
    table.add_row("remedies", escape(", ".join(f"{k}: {v}" for k, v in sorted(remedies.items())) or "none needed"))
    partitions = rep.get("plan", {}).get("partitions")
    if partitions:
        table.add_row("partitions", escape(partitions["summary"]))
    rules = Counter(a["rule"] for a in rep.get("applied_rules", []))
    if rules:
        table.add_row("rules applied", escape(", ".join(f"{k} ×{v}" for k, v in sorted(rules.items()))))
    if rep.get("quantization"):
        from ..quantize.report import summary_line

        table.add_row("quantization", escape(summary_line(rep["quantization"])))
    table.add_row("files", escape("\n".join(result.files)))
    table.add_row("timings", ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items()))
    if getattr(result, "oracle", ""):
        table.add_row("judged by", escape(result.oracle))
    style = _STATUS_STYLE.get(result.status, "red")
    table.add_row("result", f"[{style}]{result.status}[/]" + (f": {escape(result.reason)}" if result.reason else ""))
    console.print(table)
    if result.verification is not None:
        from ..verify.report import print_report

        print_report(result.verification, console)


def print_many(console, results, failures) -> None:
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


def _hist(hist: dict) -> str:
    total = sum(hist.values())
    return escape(f"{total} nodes: " + ", ".join(f"{op} {n}" for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))))
