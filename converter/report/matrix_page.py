"""The support-matrix report page: one self-contained HTML file (no network assets).

``build_matrix_page(matrix, checks=None, model_name=None) -> str``: the full matrix (op x
framework x hardware, colored by status, constraint text and source on hover and in a details
panel on click, where each source is a link to the cited upstream lines on github.com) with search
and filters; with ``checks`` (a list of
:class:`~converter.legalize.check.CheckResult` for every framework x hardware) the model's ops are
highlighted and its per-node verdicts are shown side by side.

The data travels as one JSON blob inside the page; the script renders and filters it.  Output is
deterministic (sorted keys, no timestamps) so re-running gives identical bytes.
"""

from __future__ import annotations

import html
import json
import re

PAGE_SCHEMA = "edgeconv.matrix-page/1"
#: Short status codes used in the page data and as CSS classes.
CODE = {"supported": "su", "unverified": "un", "unsupported": "no"}


def page_data(matrix, checks=None, model_name: str | None = None) -> dict:
    columns = [{"framework": fw, "hw": hw, "title": matrix.data["frameworks"][fw]["hardware"][hw].get("title", hw),
                "source": matrix.data["frameworks"][fw]["hardware"][hw].get("source"),
                "properties": matrix.properties(fw, hw)}
               for fw in matrix.frameworks for hw in matrix.hardware(fw)]
    rows = []
    for op in matrix.ops():
        cells = []
        for col in columns:
            d = matrix.describe(col["framework"], col["hw"], op)
            cells.append({"s": CODE[d["status"]], "t": d["target"], "n": d["note"], "src": d["source"],
                          "c": d["constraints"]})
        rows.append({"op": op, "cells": cells})
    data = {"schema": PAGE_SCHEMA, "columns": columns, "rows": rows, "model": None}
    if checks:
        by_pair = {(r.framework, r.hw): r for r in checks}
        ordered = [by_pair.get((c["framework"], c["hw"])) for c in columns]
        first = next(r for r in ordered if r is not None)
        nodes = []
        for i, v0 in enumerate(first.verdicts):
            verdicts = []
            for r in ordered:
                if r is None:
                    verdicts.append(None)
                    continue
                v = r.verdicts[i]
                verdicts.append({"s": CODE[v.status], "r": v.reason, "k": v.constraint, "src": v.source})
            nodes.append({"node": v0.node, "op": v0.op, "v": verdicts})
        data["model"] = {
            "name": model_name or "model",
            "ops": sorted({v.op for v in first.verdicts}),
            "nodes": nodes,
            "targets": [None if r is None else {"ok": r.ok, "summary": r.summary(),
                                                "issues": [i.reason for i in r.model_issues]}
                        for r in ordered],
        }
    data["links"] = _links(matrix, data)
    return data


def _links(matrix, data: dict) -> dict:
    """citation -> its GitHub URL, for every citation the page shows."""
    cited = {c["source"] for c in data["columns"]}
    for row in data["rows"]:
        for cell in row["cells"]:
            cited.add(cell["src"])
            cited.update(k["source"] for k in cell["c"])
    for node in (data["model"] or {}).get("nodes", []):
        cited.update(v["src"] for v in node["v"] if v)
    return {text: matrix.citation(text).url for text in sorted(filter(None, cited))}


def build_matrix_page(matrix, checks=None, model_name: str | None = None) -> str:
    data = page_data(matrix, checks, model_name)
    # Inside <script>, "<" only ever appears in JSON strings: as \u003c no model name can close
    # the element ("</script>") or open a comment ("<!--").
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).replace("<", "\\u003c")
    title = "edgeconv op support matrix" + (f" — {model_name}" if model_name else "")
    # One pass over the template: text inserted for one placeholder (a model file named
    # "@@JS@@.onnx") is never searched for the others.
    values = {"TITLE": html.escape(title), "DATA": blob, "CSS": _CSS, "JS": _JS}
    return re.sub(r"@@(TITLE|DATA|CSS|JS)@@", lambda m: values[m.group(1)], _TEMPLATE)


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>@@CSS@@</style>
</head>
<body>
<h1>@@TITLE@@</h1>
<p class="legend"><span class="su">supported</span> <span class="un">unverified (vendor silent)</span>
<span class="un2">unsupported</span> — hover a cell for the target op, constraints and source; click it for details.</p>
<section id="model-summary" hidden></section>
<form id="filters" onsubmit="return false">
  <label>op <input id="f-op" type="search" placeholder="e.g. Conv" autocomplete="off"></label>
  <label>framework <select id="f-fw"><option value="">all</option></select></label>
  <label>hardware <select id="f-hw"><option value="">all</option></select></label>
  <label>status <select id="f-status"><option value="">any</option><option value="su">supported</option>
    <option value="un">unverified</option><option value="no">unsupported</option></select></label>
  <label id="only-model-label" hidden><input id="f-model" type="checkbox"> model ops only</label>
  <span id="count"></span>
</form>
<div class="scroll"><table id="matrix"><thead></thead><tbody></tbody></table></div>
<aside id="details" hidden></aside>
<section id="verdicts" hidden><h2>Per-node verdicts</h2>
<div class="scroll"><table id="nodes"><thead></thead><tbody></tbody></table></div></section>
<script type="application/json" id="data">@@DATA@@</script>
<script>@@JS@@</script>
</body>
</html>
"""

_CSS = """
body{font:13px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1em;color:#222}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em}
.legend span{padding:1px 6px;border-radius:3px}
.su{background:#c8ecc8}.un{background:#fbeab0}.un2,.no{background:#f5b8b8}
form{display:flex;gap:1em;flex-wrap:wrap;align-items:center;margin:.6em 0;position:sticky;top:0;background:#fff;padding:.3em 0;z-index:2}
.scroll{overflow:auto;max-height:75vh;border:1px solid #ddd}
table{border-collapse:collapse}
th,td{border:1px solid #e2e2e2;padding:2px 5px;text-align:center;white-space:nowrap}
thead th{position:sticky;top:0;background:#f4f4f4;z-index:1}
thead tr:nth-child(2) th{top:1.6em}
td.op,th.op{text-align:left;font-weight:600;position:sticky;left:0;background:#fafafa}
td.cell{cursor:pointer;min-width:1.6em}
tr.in-model td.op{background:#dbe8ff}
tr.in-model td.op::after{content:" \\25CF";color:#2b6ad8}
#details{border:1px solid #bbb;background:#fcfcfc;padding:.6em 1em;margin:.6em 0;max-width:60em}
#details code{background:#eee;padding:0 3px}
a.cite{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;word-break:break-all}
#model-summary{margin:.6em 0}
#model-summary .ok{color:#1b7a1b}#model-summary .bad{color:#b01818}
td.reason{text-align:left;white-space:normal;max-width:30em}
"""

_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("data").textContent);
  var cols = data.columns, rows = data.rows, model = data.model;
  var LABEL = {su: "supported", un: "unverified", no: "unsupported"};
  var MARK = {su: "\u2713", un: "?", no: "\u2717"};
  var modelOps = model ? new Set(model.ops) : new Set();
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }
  function cellTitle(op, col, c) {
    var lines = [op + " on " + col.framework + "/" + col.hw + ": " + LABEL[c.s]];
    if (c.t) { lines.push("maps to: " + c.t); }
    if (c.n) { lines.push(c.n); }
    (c.c || []).forEach(function (k) { lines.push((k.severity === "unverified" ? "(unverified) " : "") + "requires " + k.text); });
    if (c.src) { lines.push("source: " + c.src); }
    return lines.join("\n");
  }
  // A citation as a link to the cited lines of the upstream file.
  function citeLink(text) {
    var a = el("a", {"class": "cite", href: data.links[text], target: "_blank", rel: "noopener"}, text);
    return a;
  }
  function sourceItem(label, text) {
    var li = el("li", {}, label);
    if (text) { li.appendChild(citeLink(text)); } else { li.appendChild(document.createTextNode("(none)")); }
    return li;
  }

  // Header: framework groups, then hardware.
  var thead = document.querySelector("#matrix thead");
  var r1 = el("tr"), r2 = el("tr");
  r1.appendChild(el("th", {"class": "op", rowspan: "2"}, "ONNX op"));
  var fws = [];
  cols.forEach(function (c) { if (fws.indexOf(c.framework) < 0) { fws.push(c.framework); } });
  fws.forEach(function (fw) {
    var n = cols.filter(function (c) { return c.framework === fw; }).length;
    r1.appendChild(el("th", {colspan: String(n), "data-fw": fw}, fw));
  });
  cols.forEach(function (c, i) {
    r2.appendChild(el("th", {"data-col": String(i), title: c.title + "\nsource: " + c.source +
      "\nmax_outputs: " + c.properties.max_outputs + ", max_rank: " + c.properties.max_rank}, c.hw));
  });
  thead.appendChild(r1); thead.appendChild(r2);

  var tbody = document.querySelector("#matrix tbody");
  rows.forEach(function (row, ri) {
    var tr = el("tr", {"data-op": row.op});
    if (modelOps.has(row.op)) { tr.className = "in-model"; }
    tr.appendChild(el("td", {"class": "op"}, row.op));
    row.cells.forEach(function (c, i) {
      var td = el("td", {"class": "cell " + c.s, "data-col": String(i), "data-row": String(ri),
                         title: cellTitle(row.op, cols[i], c)}, MARK[c.s] + ((c.c || []).length ? "*" : ""));
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  });

  tbody.addEventListener("click", function (ev) {
    var td = ev.target.closest("td.cell");
    if (!td) { return; }
    var row = rows[+td.getAttribute("data-row")], col = cols[+td.getAttribute("data-col")];
    var c = row.cells[+td.getAttribute("data-col")];
    var box = $("details");
    box.innerHTML = "";
    box.appendChild(el("h2", {}, row.op + " on " + col.framework + "/" + col.hw + ": " + LABEL[c.s]));
    var ul = el("ul");
    ul.appendChild(el("li", {}, "maps to: " + (c.t || "(nothing)")));
    if (c.n) { ul.appendChild(el("li", {}, c.n)); }
    (c.c || []).forEach(function (k) {
      var li = el("li", {}, (k.severity === "unverified" ? "(unverified evidence) " : "") + "requires " + k.text);
      if (k.source) {
        li.appendChild(document.createTextNode("  ["));
        li.appendChild(citeLink(k.source));
        li.appendChild(document.createTextNode("]"));
      }
      ul.appendChild(li);
    });
    ul.appendChild(sourceItem("source: ", c.src));
    ul.appendChild(sourceItem(col.framework + "/" + col.hw + " column source: ", col.source));
    box.appendChild(ul);
    box.hidden = false;
  });

  // Filters.
  var fwSel = $("f-fw"), hwSel = $("f-hw");
  fws.forEach(function (fw) { fwSel.appendChild(el("option", {value: fw}, fw)); });
  var hwNames = [];
  cols.forEach(function (c) { if (hwNames.indexOf(c.hw) < 0) { hwNames.push(c.hw); } });
  hwNames.sort().forEach(function (hw) { hwSel.appendChild(el("option", {value: hw}, hw)); });

  function visibleCols() {
    var fw = fwSel.value, hw = hwSel.value;
    return cols.map(function (c) { return (!fw || c.framework === fw) && (!hw || c.hw === hw); });
  }
  function apply() {
    var q = $("f-op").value.trim().toLowerCase(), st = $("f-status").value;
    var onlyModel = $("f-model").checked;
    var vis = visibleCols(), shown = 0;
    document.querySelectorAll("[data-col]").forEach(function (e) {
      e.style.display = vis[+e.getAttribute("data-col")] ? "" : "none";
    });
    document.querySelectorAll("#matrix thead th[data-fw]").forEach(function (th) {
      var n = cols.filter(function (c, i) { return vis[i] && c.framework === th.getAttribute("data-fw"); }).length;
      th.style.display = n ? "" : "none";
      if (n) { th.setAttribute("colspan", String(n)); }
    });
    Array.prototype.forEach.call(tbody.rows, function (tr, ri) {
      var row = rows[ri];
      var ok = (!q || row.op.toLowerCase().indexOf(q) >= 0) && (!onlyModel || modelOps.has(row.op));
      if (ok && st) { ok = row.cells.some(function (c, i) { return vis[i] && c.s === st; }); }
      tr.style.display = ok ? "" : "none";
      if (ok) { shown++; }
    });
    $("count").textContent = shown + " of " + rows.length + " ops";
    if (model) { applyNodes(vis, q, st); }
  }
  ["f-op", "f-fw", "f-hw", "f-status", "f-model"].forEach(function (id) {
    $(id).addEventListener("input", apply);
    $(id).addEventListener("change", apply);
  });

  // Model: summary per target and the per-node verdict table.
  function applyNodes(vis, q, st) {
    Array.prototype.forEach.call(document.querySelector("#nodes tbody").rows, function (tr, i) {
      var n = model.nodes[i];
      var ok = (!q || n.op.toLowerCase().indexOf(q) >= 0);
      if (ok && st) { ok = n.v.some(function (v, j) { return vis[j] && v && v.s === st; }); }
      tr.style.display = ok ? "" : "none";
    });
  }
  if (model) {
    $("only-model-label").hidden = false;
    var sum = $("model-summary");
    sum.hidden = false;
    sum.appendChild(el("h2", {}, "Where can " + model.name + " run, and what blocks it?"));
    var ul = el("ul");
    model.targets.forEach(function (t, i) {
      if (!t) { return; }
      var li = el("li", {"class": t.ok ? "ok" : "bad", "data-col": String(i)}, t.summary);
      t.issues.forEach(function (s) { li.appendChild(el("div", {}, "model: " + s)); });
      ul.appendChild(li);
    });
    sum.appendChild(ul);
    $("verdicts").hidden = false;
    var nh = document.querySelector("#nodes thead"), hr = el("tr");
    hr.appendChild(el("th", {"class": "op"}, "node"));
    hr.appendChild(el("th", {}, "op"));
    cols.forEach(function (c, i) { hr.appendChild(el("th", {"data-col": String(i)}, c.framework + "/" + c.hw)); });
    nh.appendChild(hr);
    var nb = document.querySelector("#nodes tbody");
    model.nodes.forEach(function (n) {
      var tr = el("tr");
      tr.appendChild(el("td", {"class": "op"}, n.node));
      tr.appendChild(el("td", {}, n.op));
      n.v.forEach(function (v, i) {
        if (!v) { tr.appendChild(el("td", {"data-col": String(i)}, "")); return; }
        tr.appendChild(el("td", {"class": "cell " + v.s, "data-col": String(i),
          title: v.r + (v.k ? "\nconstraint: " + v.k : "") + (v.src ? "\nsource: " + v.src : "")}, MARK[v.s]));
      });
      nb.appendChild(tr);
    });
  }
  apply();
})();
"""
