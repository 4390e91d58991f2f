"""Names the target formats can carry: one sanitizer, each format's rule as data.

Every format forbids some characters in file stems or tensor/layer names (TNN splits its text
format on ``,`` ``"`` ``:`` and blanks; MIL names are identifiers; ...).  A :class:`NameRule`
says which characters and what to do around them; ``rule(name)`` applies it.  Unique names are
:func:`converter.ir.graph.unique_name` (``base``, ``base_1``, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NameRule:
    #: A regex character class of the characters the format cannot carry; each becomes ``_``.
    forbidden: str
    #: A run of forbidden characters becomes one ``_`` (instead of one per character).
    collapse: bool = False
    #: Characters stripped from both ends after replacing.
    strip: str = ""
    #: What an empty result becomes.
    empty: str = "_"
    #: Prefix for a result starting with a digit (identifiers), ``""`` for none.
    digit_prefix: str = ""
    _pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_pattern", re.compile(self.forbidden + ("+" if self.collapse else "")))

    def __call__(self, name: str) -> str:
        clean = self._pattern.sub("_", str(name))
        if self.strip:
            clean = clean.strip(self.strip)
        clean = clean or self.empty
        if self.digit_prefix and clean[0].isdigit():
            clean = self.digit_prefix + clean
        return clean


#: A portable file stem: letters, digits, ``_ . -`` (no leading/trailing dots: no hidden files).
FILE_STEM = NameRule(r"[^A-Za-z0-9_.-]", collapse=True, strip="._", empty="model")
