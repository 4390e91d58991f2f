"""Citations of upstream sources: ``owner/repo@commit:path#Lline`` or ``...#Lfirst-Llast``.

A matrix ``source:`` names the upstream document itself (a vendor's doc table row, a kernel's
check), not a local copy: ``Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190``.  The commit
may be abbreviated; the matrix's ``upstreams:`` table pins each repository to one full commit, and
a citation is valid only if its commit is a prefix of that one, so every citation of a repository
points into the same snapshot and links to a permanent GitHub URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["Citation", "CitationError", "parse_citation", "resolve_citation"]

_CITATION = re.compile(
    r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<commit>[0-9a-f]{7,40})"
    r":(?P<path>[^\s#:][^\s#]*)#L(?P<first>[1-9][0-9]*)(?:-L(?P<last>[1-9][0-9]*))?")
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")


class CitationError(ValueError):
    """A ``source:`` that is not a valid citation of a pinned upstream."""


@dataclass(frozen=True)
class Citation:
    """One cited line range of one file at one upstream commit.

    ``commit`` is as written (often abbreviated); ``pinned`` is the full commit from ``upstreams``
    once the citation is resolved (empty before).
    """

    repo: str
    commit: str
    path: str
    first: int
    last: int
    pinned: str = ""

    @property
    def text(self) -> str:
        lines = f"L{self.first}" if self.first == self.last else f"L{self.first}-L{self.last}"
        return f"{self.repo}@{self.commit}:{self.path}#{lines}"

    @property
    def url(self) -> str:
        """The GitHub page of the cited lines (at the pinned full commit once resolved)."""
        lines = f"L{self.first}" if self.first == self.last else f"L{self.first}-L{self.last}"
        return f"https://github.com/{self.repo}/blob/{self.pinned or self.commit}/{self.path}#{lines}"

    def to_dict(self) -> dict:
        """The JSON form (``edgeconv check --json``): the commit in full, and the link."""
        return {"text": self.text, "repo": self.repo, "commit": self.pinned or self.commit,
                "path": self.path, "lines": [self.first, self.last], "url": self.url}


#: No source file has a billion lines.
_MAX_LINE_DIGITS = 9


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def parse_citation(text) -> Citation:
    """Split a citation into its parts; CitationError says what is wrong with it."""
    if not isinstance(text, str):
        raise CitationError(f"a source must be a citation string, not {type(text).__name__}")
    m = _CITATION.fullmatch(text.strip())
    if m is None:
        raise CitationError(f"'{_short(text)}' is not a citation owner/repo@commit:path#Lline (or #Lfirst-Llast)")
    if max(len(m["first"]), len(m["last"] or "")) > _MAX_LINE_DIGITS:  # int() of 5000 digits is refused
        raise CitationError(f"'{_short(text)}': a line number has more than {_MAX_LINE_DIGITS} digits")
    first = int(m["first"])
    last = int(m["last"] or first)
    if last < first:
        raise CitationError(f"'{text}': the line range ends before it starts")
    if "/../" in f"/{m['path']}/" or m["path"].startswith("/"):
        raise CitationError(f"'{text}': the path must be relative to the repository root")
    return Citation(m["repo"], m["commit"], m["path"], first, last)


def resolve_citation(text, upstreams: dict) -> Citation:
    """The citation with its full commit, checked against the pinned ``upstreams``."""
    citation = parse_citation(text)
    full = upstreams.get(citation.repo)
    if full is None:
        raise CitationError(f"'{text}': {citation.repo} is not in upstreams "
                            f"({', '.join(sorted(upstreams)) or 'none pinned'})")
    if not full.startswith(citation.commit):
        raise CitationError(f"'{text}': commit {citation.commit} is not the pinned {citation.repo}@{full[:7]}")
    return replace(citation, pinned=full)


def valid_full_commit(value) -> bool:
    return isinstance(value, str) and _FULL_COMMIT.fullmatch(value) is not None
