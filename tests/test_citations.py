"""Every citation in op_support_matrix.yaml resolves: pinned repo@commit, a real line range, and the
cited lines say what tests/data/citations.yaml quotes from them.

The lines are read from the verbatim mirror copies in ``<repo>/../shared/reference`` (the table in
tests/data/citations.yaml maps upstream files to them, from that folder's SOURCES.md).  Upstream
files without a mirror copy (kernel and converter sources) are checked against git clones of the
pinned upstreams when ``EDGECONV_UPSTREAMS`` names a directory holding them (``<owner>+<repo>``,
bare or with a work tree, or with the git directory in ``repo/``); without it their citation is
checked for syntax and pinning only.  A missing mirror folder, an unknown citation or a quote not
on its lines fails the test; nothing here skips.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from converter.matrix import load_matrix
from converter.matrix.citations import CitationError, parse_citation, resolve_citation
from converter.matrix.schema import iter_citations

REPO = Path(__file__).resolve().parents[1]
MIRROR = (REPO / ".." / "shared" / "reference").resolve()
TABLE = yaml.safe_load((Path(__file__).parent / "data" / "citations.yaml").read_text())
#: The four framework snapshots SOURCES.md pins (owner/repo as SOURCES.md spells their commits).
MAIN_UPSTREAMS = ("google-ai-edge/LiteRT", "apple/coremltools", "Tencent/TNN", "XiaoMi/mace")


@pytest.fixture(scope="module")
def m():
    return load_matrix()


@pytest.fixture(scope="module")
def citations(m):
    """citation text -> resolved Citation, for every source / rank_source / sources value."""
    return {text: m.citation(text) for _, text in iter_citations(m.data)}


def _mirror_file(citation) -> Path | None:
    key = f"{citation.repo}@{citation.pinned[:7]}:{citation.path}"
    name = TABLE["mirrors"].get(key)
    return None if name is None else MIRROR / name


def _lines(text: str, citation) -> str:
    lines = text.splitlines()
    assert citation.last <= len(lines), f"{citation.text}: the file has {len(lines)} lines"
    return "\n".join(lines[citation.first - 1:citation.last])


def test_mirror_is_present_and_pins_the_same_commits(m):
    sources = MIRROR / "SOURCES.md"
    if not sources.is_file():
        pytest.fail(f"the upstream mirror is missing: {sources} (citations cannot be resolved)")
    text = sources.read_text()
    for repo in MAIN_UPSTREAMS:
        full = m.upstreams[repo]
        assert re.search(rf"{re.escape(repo)} @ {full}\b", text), f"SOURCES.md pins {repo} at another commit"
    extra = set(m.upstreams) - set(MAIN_UPSTREAMS)
    assert extra <= set(TABLE["extra_upstreams"]), f"say why in tests/data/citations.yaml: {extra - set(TABLE['extra_upstreams'])}"
    for repo in extra:
        pinned_there = re.search(rf"{re.escape(repo)} @([0-9a-f]{{7,40}})", text)
        if pinned_there:
            assert m.upstreams[repo].startswith(pinned_there.group(1)), f"SOURCES.md pins {repo} at another commit"
    for key, name in TABLE["mirrors"].items():
        assert (MIRROR / name).is_file(), f"mirror copy of {key} missing: {name}"
        base = name.split("/")[-1]
        assert base in text or re.sub(r"_[^_]+$", "_*.md", base) in text, f"{name} is not listed in SOURCES.md"
        assert key.split("@")[0] in m.upstreams, key


def test_every_citation_is_pinned_and_quoted(m, citations):
    assert len(citations) >= 100
    quotes = TABLE["quotes"]
    unquoted = sorted(set(citations) - set(quotes))
    assert unquoted == [], ("add each citation with a word its lines contain to tests/data/citations.yaml "
                            f"quotes: {unquoted}")
    stale = sorted(set(quotes) - set(citations))
    assert stale == [], f"quotes of citations the matrix no longer has: {stale}"
    for text, citation in citations.items():
        assert citation.pinned == m.upstreams[citation.repo], text
        assert citation.url == (f"https://github.com/{citation.repo}/blob/{citation.pinned}/{citation.path}"
                                + (f"#L{citation.first}" if citation.first == citation.last
                                   else f"#L{citation.first}-L{citation.last}")), text
        assert not citation.path.startswith(("../", "/")) and "shared/reference" not in citation.path, text


def test_cited_lines_say_what_is_quoted_in_the_mirror(citations):
    checked = 0
    for text, citation in sorted(citations.items()):
        mirror = _mirror_file(citation)
        if mirror is None:
            continue
        assert mirror.is_file(), f"{text}: mirror copy {mirror} missing"
        lines = _lines(mirror.read_text(encoding="utf-8"), citation)
        assert TABLE["quotes"][text] in lines, f"{text}: {TABLE['quotes'][text]!r} is not on the cited lines:\n{lines}"
        checked += 1
    # schema.fbs, TNN's support table, MACE's op list, coremltools' docs, hollance's ANE notes.
    assert checked >= 25


def _upstream_git(repo: str) -> Path | None:
    root = os.environ.get("EDGECONV_UPSTREAMS")
    if not root:
        return None
    base = Path(root) / repo.replace("/", "+")
    for candidate in (base / "repo", base):
        if candidate.is_dir():
            return candidate
    pytest.fail(f"EDGECONV_UPSTREAMS={root} has no clone of {repo} ({base})")


def test_cited_lines_in_upstream_snapshots(citations):
    """With EDGECONV_UPSTREAMS set, every citation (kernels too) is read from the pinned commit."""
    if not os.environ.get("EDGECONV_UPSTREAMS"):
        pytest.skip("EDGECONV_UPSTREAMS not set: citations without a mirror copy are checked for syntax "
                    "and pinning only")
    for text, citation in sorted(citations.items()):
        git = _upstream_git(citation.repo)
        shown = subprocess.run(["git", "-C", str(git), "show", f"{citation.pinned}:{citation.path}"],
                               capture_output=True, text=True)
        assert shown.returncode == 0, f"{text}: {shown.stderr.strip()}"
        lines = _lines(shown.stdout, citation)
        assert TABLE["quotes"][text] in lines, f"{text}: {TABLE['quotes'][text]!r} is not on the cited lines:\n{lines}"


@pytest.mark.parametrize("text, message", [
    ("tnn/doc_en_user_support_en.md", "is not a citation"),
    ("Tencent/TNN@f0cb081:doc/en/user/support_en.md", "is not a citation"),
    ("Tencent/TNN@f0cb081:doc/en/user/support_en.md#L0", "is not a citation"),
    ("Tencent/TNN@f0cb081:doc/en/user/support_en.md#L9-L3", "ends before it starts"),
    ("Tencent/TNN@f0cb081:../doc/support_en.md#L3", "relative to the repository root"),
    ("Tencent/TNN@1234567:doc/en/user/support_en.md#L3", "is not the pinned Tencent/TNN@f0cb081"),
    ("someone/else@1234567:README.md#L3", "is not in upstreams"),
])
def test_bad_citations_are_refused(m, text, message):
    with pytest.raises(CitationError, match=re.escape(message)):
        resolve_citation(text, m.upstreams)


def test_a_bad_source_in_an_overlay_points_at_its_line(tmp_path):
    overlay = tmp_path / "mine.yaml"
    overlay.write_text("frameworks:\n  tnn:\n    ops:\n      Conv:\n        source: ../shared/reference/tnn/x.md\n")
    from converter.errors import BadInput

    with pytest.raises(BadInput, match=r"^mine.yaml:5: frameworks.tnn.ops.Conv.source: '../shared/reference/tnn/x.md' "
                                       r"is not a citation"):
        load_matrix(overlays=[overlay])


def test_citation_round_trip():
    c = parse_citation("XiaoMi/mace@0fc55a5:mace/ops/pad.cc#L70")
    assert (c.repo, c.commit, c.path, c.first, c.last, c.text) == (
        "XiaoMi/mace", "0fc55a5", "mace/ops/pad.cc", 70, 70, "XiaoMi/mace@0fc55a5:mace/ops/pad.cc#L70")
    assert parse_citation("a/b@abcdef0:x/y.md#L3-L7").url == "https://github.com/a/b/blob/abcdef0/x/y.md#L3-L7"


def test_port_page_links_the_source_of_an_unsupported_node(m):
    from converter.report.port_page import _check_table

    verdict = m.check_node(_FakeNode("ConvTranspose"), "tnn", "rknpu").to_dict()
    html = _check_table({"target": "tnn", "hw": "rknpu", "check": {"verdicts": [verdict], "model_issues": []}})
    url = ("https://github.com/Tencent/TNN/blob/f0cb08129a05c5b60f08e4ef66042a54a883a56a/"
           "doc/en/user/support_en.md#L65-L190")
    assert f'<a href="{url}"><code>Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190</code></a>' in html


class _FakeNode:
    def __init__(self, op):
        self.op, self.name, self.domain, self.inputs, self.outputs, self.attrs = op, "n0", "", [], [], {}
