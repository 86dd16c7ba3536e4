"""What a paragraph says, as the offline consolidator compares it (pure, deterministic).

The built-in writer stores each fact as ``<Speaker> (<date>): <sentence>`` followed
by its citations; the same fact told in ten sessions differs only in the
speaker label, the date, punctuation and case. So a paragraph's **statement**
is its text without citations and without that leading label, and two
statements are compared as sequences of lowercase words:

* **the same fact**: equal word sequences (an exact duplicate), or word sets
  whose Jaccard similarity is at least :data:`NEAR` with both at least
  :data:`MIN_WORDS` long (a near duplicate: "I prefer green tea" / "I really
  prefer green tea");
* **a newer value of the same thing**: the two share a leading frame of at
  least :data:`FRAME` words and differ only after it, in at most
  :data:`TAIL` words each ("My usual drink is green tea" / "My usual drink
  is coffee"), and
  both are dated with comparable, different dates. The later one is current.
  A heuristic ("we went to Paris" / "we went to Rome" may both stay true:
  the older is then shown as history; it is never dropped, and still
  cited). A frame of 2 words superseded 134 paragraphs of LoCoMo and cost
  recall; 3 words keeps every recall figure at or above the one before.

Both rules are bounded to paragraphs sharing their first :data:`SUBJECT`
words. Facts are folded together by their **subject**, the first word that
is not a function word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memory.workspace._topics import CITATION, Footnote, Paragraph

__all__ = [
    "FRAME",
    "MIN_WORDS",
    "NEAR",
    "SUBJECT",
    "TAIL",
    "later_when",
    "paragraph_when",
    "same_fact",
    "statement",
    "subject",
    "superseding_frame",
    "words",
]

NEAR = 0.8
MIN_WORDS = 4
FRAME = 3
TAIL = 3
SUBJECT = 2

# "User (2 December 2026): " or "Owner: ": the speaker label the built-in writer puts first.
_LABEL = re.compile(r"^[^\s:()][^:()\n]{0,40}(?: \([^()\n]{1,40}\))?: ")
_WORD = re.compile(r"[0-9a-z]+(?:'[a-z]+)?")
# "Previously (...): ..." lines a supersede keeps under the current statement.
HISTORY_PREFIX = "Previously"


def statement(paragraph: Paragraph) -> str:
    """The paragraph's current statement: its first line, without citations or speaker label."""
    first = paragraph.body.split("\n", 1)[0]
    return _LABEL.sub("", CITATION.sub("", first)).strip()


def words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower()))


_FUNCTION_WORDS = frozenset(
    ["a", "an", "the", "my", "our", "your", "his", "her", "their", "its", "this", "that", "i", "we", "you", "he", "she", "it", "they", "is", "am", "are", "was", "were", "be", "has", "have", "had", "do", "does", "did", "also"])


def subject(text: str) -> tuple[str, ...]:
    """What a statement is about, for folding: its first word that is not a function word
    ("Alice works ..." and "Alice lives ..." are both about ``alice``)."""
    return next(((w,) for w in words(text) if w not in _FUNCTION_WORDS), ())


def same_fact(a: Sequence[str], b: Sequence[str]) -> bool:
    if tuple(a) == tuple(b):
        return bool(a)
    if len(a) < MIN_WORDS or len(b) < MIN_WORDS:
        return False
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) >= NEAR


def superseding_frame(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether ``a`` and ``b`` state different values in one frame (see the module docstring)."""
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    rest_a, rest_b = len(a) - common, len(b) - common
    return common >= FRAME and 0 < rest_a <= TAIL and 0 < rest_b <= TAIL


def paragraph_when(paragraph: Paragraph, footnotes: Mapping[str, Footnote]) -> str | None:
    """The latest date the paragraph's current statement cites (None: undated)."""
    first = paragraph.body.split("\n", 1)[0]
    dated = [footnotes[label].when for label in dict.fromkeys(CITATION.findall(first))
             if label in footnotes and footnotes[label].when != "undated"]
    return max(dated) if dated else None


def later_when(a: str | None, b: str | None) -> int:
    """1 if ``a`` is later than ``b``, -1 if earlier, 0 if not comparable (undated, or one
    contains the other: ``2025`` and ``2025-03`` may be the same day)."""
    if a is None or b is None or a.startswith(b) or b.startswith(a):
        return 0
    return 1 if a > b else -1
