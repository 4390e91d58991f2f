"""The README's first screen runs as written, and the documentation's links and code names resolve.

The first screen is everything above ``## Documentation``.  Its shell blocks are run with bash as
they stand, in README order, in one temporary directory, with ``edgeconv`` and ``python`` on PATH
meaning this checkout (``python -m converter``); the output blocks after them are compared with
what the commands printed (cell by cell: timings and library versions may differ, nothing else).
The contributor's test command (``bash scripts/test.sh``) is the test suite itself: it is checked
to be what CI runs, not run.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FIRST_SCREEN_END = "\n## Documentation\n"
MAX_README_LINES = 250

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


# ------------------------------------------------------------------------------------ parsing


def first_screen() -> str:
    text = README.read_text(encoding="utf-8")
    assert FIRST_SCREEN_END in text, "the README's first screen ends at its '## Documentation' heading"
    return text[:text.index(FIRST_SCREEN_END)]


def section(title: str) -> str:
    """The first screen's text under the ``## `` heading starting with ``title``."""
    screen = first_screen()
    match = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", screen, re.M | re.S)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text``: (language, body)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def block(text: str, lang: str, index: int = 0) -> str:
    found = [body for kind, body in blocks(text) if kind == lang]
    assert len(found) > index, f"expected a ```{lang} block"
    return found[index]


def markdown_table(text: str) -> list[list[str]]:
    """The rows (cells stripped) of the first markdown table in ``text``, header and rule left out."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in rows[2:]]


def box_rows(text: str) -> list[list[str]]:
    """The rows of a rich table (``│``/``┃`` separated cells), continuation lines (an empty first
    cell) joined into the row above; each cell stripped, continuation parts joined by newlines."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line.startswith(("│", "┃")):
            continue
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if rows and cells[0] == "" and len(rows[-1]) == len(cells):
            rows[-1] = [f"{a}\n{b}".strip("\n") if b else a for a, b in zip(rows[-1], cells)]
        else:
            rows.append(cells)
    return rows


def tree_files(tree: str) -> set[str]:
    """The files a ``tree``-style block shows (``├── name   comment``), as paths below its root."""
    files, stack = set(), []
    for line in tree.splitlines()[1:]:
        match = re.match(r"^([│ ]*)[├└]── (\S+)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4
        stack = stack[:depth]
        name = match.group(2)
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
        else:
            files.add("/".join([*stack, name]))
    return files


def versionless(text: str) -> str:
    """``text`` with library versions and seconds blanked: they differ between hosts, nothing else may."""
    text = re.sub(r"\b\d+\.\d+\.\d+\b", "X.Y.Z", text)
    return re.sub(r"\b\d+\.\d+s\b", "N.NNs", text)


# ------------------------------------------------------------------------------------ running


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """``shell(script, cwd=None) -> CompletedProcess``: bash running ``script`` as a user would,
    with ``edgeconv`` and ``python`` meaning this checkout; cwd the module's work directory."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, argv in (("edgeconv", '-m converter "$@"'), ("python", '"$@"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {argv}\n')
        (bin_dir / name).chmod(0o755)
    work = tmp_path_factory.mktemp("readme")
    env = {k: v for k, v in os.environ.items()
           if k not in {"COLUMNS", "LINES", "FORCE_COLOR", "EDGECONV_TNN_RUNTIME", "EDGECONV_MACE_RUNTIME"}}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))

    def run(script: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd or work, env=env,
                              capture_output=True, text=True, timeout=900)

    run.work = work
    return run


def _ran(result: subprocess.CompletedProcess, expected_exit: int = 0) -> str:
    assert result.returncode == expected_exit, (
        f"exit {result.returncode}, README expects {expected_exit}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="module")
def first_port(shell):
    """The 'Port a model' block run as written: (stdout, the work directory)."""
    pytest.importorskip("torch")  # the README's model is made with torch.export
    return _ran(shell(block(section("Port a model"), "bash"))), shell.work


# --------------------------------------------------------------------------------- the checks


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_the_two_commands_are_setup_with_demo_and_what_ci_runs():
    commands = [line.split("#")[0].strip() for line in block(section("Two commands"), "bash").splitlines()]
    assert commands == ["bash scripts/setup.sh && .venv/bin/edgeconv demo", "bash scripts/test.sh"]
    # CI runs exactly the README's test command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == f"exec {commands[1]}"
    # setup.sh makes the .venv whose console script the demo command calls
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-m venv .venv" in setup and "pip install -q -e \".[all]\"" in setup
    assert 'edgeconv = "converter.cli:run"' in (ROOT / "pyproject.toml").read_text()


def test_demo_runs(shell, tmp_path):
    pytest.importorskip("torch")  # the demo builds its model in torch
    command = block(section("Two commands"), "bash").splitlines()[0].split("&&")[1].split("#")[0].strip()
    assert command == ".venv/bin/edgeconv demo"
    out = _ran(shell("edgeconv demo", cwd=tmp_path))
    summary = {row[0]: row[1] for row in box_rows(out) if len(row) == 2}
    assert summary["result"] == "ok" and summary["judged by"].startswith("LiteRT")
    assert (tmp_path / "demo-out" / "tflite-cpu" / "detector.tflite").is_file()


def test_first_port_prints_the_readme_tables(first_port):
    out, _ = first_port
    shown = block(section("Port a model"), "text", 0)
    assert out.splitlines()[0] == shown.splitlines()[0]  # "model.pt2 → tflite/gpu"
    summary = [[versionless(c) for c in row] for row in box_rows(out) if len(row) == 2]
    assert summary == [[versionless(c) for c in row] for row in box_rows(shown) if len(row) == 2]
    # the verification table: stages, outputs, tolerances and verdicts (errors differ in last digits)
    def verdicts(text):
        return [(r[0], r[1], r[6], r[7]) for r in box_rows(text) if len(r) == 8]
    assert verdicts(out) == verdicts(shown) and len(verdicts(shown)) == 4
    assert versionless(out.splitlines()[-1]) == versionless(shown.splitlines()[-1])


def test_first_port_writes_the_readme_tree(first_port):
    _, work = first_port
    shown = tree_files(block(section("Port a model"), "text", 1))
    written = {str(p.relative_to(work / "out")) for p in (work / "out").rglob("*") if p.is_file()}
    assert written == shown
    report = json.loads((work / "out" / "report.json").read_text())
    assert report["status"] == "ok" and report["oracle"].startswith("LiteRT")
    layout = report["artifact"]["meta"]["inputs"][0]
    assert layout["layout"] == "NHWC" and layout["stored_shape"] == [1, 224, 224, 3]  # "image input NHWC"


def test_statuses_table_matches_the_code():
    from converter.batch.runner import EXIT_BATCH_FAILED
    from converter.errors import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_MISSING_EXTRA,
                                  EXIT_TERMINATED, EXIT_TIMEOUT)
    from converter.port.outcome import STATUS_EXIT

    text = section("Statuses")
    shown = {row[0].strip("`"): int(row[1]) for row in markdown_table(text)}
    assert shown == STATUS_EXIT
    others = {int(n) for n in re.findall(r"\*\*(\d+)\*\*", text)}
    assert others == {EXIT_BAD_INPUT, EXIT_MISSING_EXTRA, EXIT_BATCH_FAILED, EXIT_TIMEOUT, EXIT_INTERNAL,
                      EXIT_INTERRUPTED, EXIT_TERMINATED}


def test_to_all_prints_what_the_readme_table_says(shell, first_port):
    text = section("Where can it run?")
    out = _ran(shell(block(text, "bash")))
    rows = {(r[0], r[1]): r for r in box_rows(out)[1:] if len(r) == 6}  # framework, hardware, result,
    shown_pairs = set()                                                    # judged by, remedies, why not
    for framework, hardware, result, judged in markdown_table(text):
        for hw in (h.strip() for h in hardware.split(",")):
            shown_pairs.add((framework, hw))
            actual = rows[(framework, hw)]
            assert actual[2] == result, (framework, hw, actual)
            said = actual[3] if result == "ok" else actual[5].replace("\n", " ")
            for piece in judged.replace("`", "").split("…"):
                assert versionless(piece.strip()) in versionless(said), (framework, hw, piece, said)
    assert shown_pairs == set(rows), "the README's rows cover every pair, once"
    count = re.search(r"`(\d+ of \d+ framework × hardware combinations work\.)`", text).group(1)
    assert out.splitlines()[-1] == count
    ported = {p.name for p in (shell.work / "all-out").iterdir() if p.name != ".edgeconv-output"}  # its marker
    assert ported == {f"{fw}-{hw}" for (fw, hw), r in rows.items() if r[2] != "error"}


def test_quantization_block(shell, first_port):
    out = _ran(shell(block(section("Quantization"), "bash")))
    summary = {row[0]: row[1] for row in box_rows(out) if len(row) == 2}
    assert summary["result"] == "ok"
    report = json.loads((shell.work / "out-int8" / "report.json").read_text())
    judged = report["quantization"]["file_verification"]
    assert judged["ok"] and judged["mode"] == "int8" and judged["runtime"].startswith("LiteRT")
    assert {"model.tflite", "quantized.onnx", "float.onnx", "quantization.json"} <= {
        p.name for p in (shell.work / "out-int8").iterdir()}
    from converter.targets.tflite._generated import schema_generated as fb

    model = fb.Model.GetRootAs((shell.work / "out-int8" / "model.tflite").read_bytes(), 0)
    graph = model.Subgraphs(0)
    types = {graph.Tensors(i).Type() for i in range(graph.TensorsLength())}
    assert fb.TensorType.INT8 in types  # a native integer file, not a float one


def test_batch_block(shell, first_port):
    _ran(shell(block(section("Batch"), "bash")))
    out = shell.work / "release-out"
    assert {p.name for p in out.iterdir()} == {"batch-summary.json", "junit.xml", "index.html", "model--tflite--cpu",
                                              "model--tflite--gpu", "model--coreml--ane", ".edgeconv-output"}


def test_python_api_block(shell, first_port):
    text = section("Python API")
    out = _ran(shell(f"python - <<'EOF'\n{block(text, 'python')}EOF\n"))
    assert versionless(out) == versionless(block(text, "text"))


# ------------------------------------------------------------------------------- links, names


def doc_files() -> list[Path]:
    """README.md and docs/*.md (not docs/incoming/: other sessions' drafts)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    links = LINK.findall(text)
    for link in links:
        if re.match(r"^[a-z]+:", link):
            continue  # https:, mailto:
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: link to {link}: no such file"
        if anchor:
            assert path.suffix == ".md" and anchor in anchors(path), f"{doc.name}: link to {link}: no such heading"


def test_readme_points_into_every_doc():
    linked = {m for m in LINK.findall(README.read_text(encoding="utf-8"))}
    for doc in ("usage", "quantization", "targets", "performance", "security", "architecture"):
        assert f"docs/{doc}.md" in linked, f"README does not point to docs/{doc}.md"
    assert not (DOCS / "CONTRACTS.md").exists()


CODE = re.compile(r"`([^`\n]+)`")
PATH_REF = re.compile(r"^(?:converter|tests|benchmarks|scripts)/[\w./-]*$")
NAME_REF = re.compile(r"^converter(?:\.\w+)+$")


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_names_exist(doc):
    """Every `converter/...`, `tests/...`, `benchmarks/...` path and every `converter.x.y` name a
    document mentions exists in this checkout (the layout moves; the documents must follow)."""
    missing = []
    for code in CODE.finditer(doc.read_text(encoding="utf-8")):
        ref = re.split(r"[(\[]", code.group(1).split()[0])[0].rstrip(".,:;")  # `f(x)` names f
        if PATH_REF.match(ref):
            path = ref.split("#")[0].split(":")[0]
            if "__pycache__" not in path and not (ROOT / path).exists():
                missing.append(ref)
        elif NAME_REF.match(ref) and not _resolves(ref):
            missing.append(ref)
    assert not missing, f"{doc.name} names what does not exist: {sorted(missing)}"


def _resolves(dotted: str) -> bool:
    """Does ``converter.a.b.c`` name a module or an attribute reachable from one?"""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            try:
                obj = getattr(obj, attr)
            except Exception:  # noqa: BLE001 - a lazy __getattr__ may fail in any way
                try:
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                except (ImportError, AttributeError):
                    return False
        return True
    return False
