"""Batch summaries that CI systems display: JUnit XML (one test case per job) and an HTML index."""

from __future__ import annotations

import html
import re
from pathlib import Path
from xml.etree import ElementTree as ET

from ..infra.fsutil import atomic_write_bytes, atomic_write_text


#: Port outcomes that are not passing: files written, but not shippable as they are.
NOT_PASSING = ("unsupported", "verify_failed", "needs_custom", "unverified")


#: Characters XML 1.0 cannot carry at all, not even as character references.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text) -> str:
    """``text`` with the characters XML cannot hold shown as ``\\xNN`` (an op type named
    ``A\\x01`` in a reason made junit.xml unreadable to every CI system)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}",
                        str(text))


def write_junit(results, path: Path) -> None:
    results = [_xml_safe(r) for r in results]
    suite = ET.Element("testsuite", name="edgeconv-batch", tests=str(len(results)),
                       failures=str(sum(r.status in NOT_PASSING for r in results)),
                       errors=str(sum(r.status in ("bad_input", "error") for r in results)),
                       skipped=str(sum(r.status == "interrupted" for r in results)),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=r.model, name=f"{r.target}/{r.hw}", time=f"{r.seconds:.3f}")
        if getattr(r, "oracle", ""):
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="oracle", value=r.oracle)
        if r.status in NOT_PASSING:
            ET.SubElement(case, "failure", message=r.reason or r.status, type=r.status).text = r.reason
        elif r.status in ("bad_input", "error"):
            ET.SubElement(case, "error", message=r.reason or r.status, type=r.status).text = r.reason
        elif r.status == "interrupted":
            ET.SubElement(case, "skipped", message=r.reason)
        if r.cached:
            ET.SubElement(case, "system-out").text = "cached: inputs unchanged since the last run"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    atomic_write_bytes(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def _xml_safe(result):
    import dataclasses

    return dataclasses.replace(result, **{f.name: xml_text(getattr(result, f.name))
                                          for f in dataclasses.fields(result) if isinstance(getattr(result, f.name), str)})


_COLORS = {"ok": "#1a7f37", "unsupported": "#9a6700", "verify_failed": "#cf222e", "needs_custom": "#9a6700",
           "unverified": "#9a6700", "bad_input": "#cf222e",
           "error": "#cf222e", "interrupted": "#57606a"}


def write_html_index(results, path: Path, title: str) -> None:
    rows = []
    for r in results:
        link = f'<a href="{html.escape(r.id)}/report.html">report</a>' if r.status in ("ok", *NOT_PASSING) else ""
        rows.append(
            f"<tr><td>{html.escape(r.model)}</td><td>{html.escape(r.target)}</td><td>{html.escape(r.hw)}</td>"
            f'<td style="color:{_COLORS.get(r.status, "#000")};font-weight:600">{html.escape(r.status)}</td>'
            f"<td>{'yes' if r.cached else ''}</td><td>{r.seconds:.2f}</td><td>{html.escape(r.reason)}</td>"
            f"<td>{link}</td></tr>")
    passed = sum(r.status == "ok" for r in results)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgeconv batch: {html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #d0d7de;padding:4px 8px;text-align:left}}th{{background:#f6f8fa}}</style></head>
<body><h1>edgeconv batch: {html.escape(title)}</h1><p>{passed} of {len(results)} jobs passed.</p>
<table><thead><tr><th>model</th><th>framework</th><th>hardware</th><th>status</th><th>cached</th>
<th>seconds</th><th>reason</th><th>report</th></tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table></body></html>
"""
    atomic_write_text(path, page)
