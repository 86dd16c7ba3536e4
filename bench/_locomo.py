"""LoCoMo for the recall benchmark: the conversations as turns, the questions, the two figures, BM25.

The benchmark (``bench/recall.py``) needs four things that do not depend on
scriptorium at all, so they live here as plain functions and are tested on
their own (``tests/bench/test_recall.py``):

- **turns**: each conversation of ``<data>/conv-*.json`` (the format is the
  dataset README's) as one session's turns: ``speaker_a`` the user,
  ``speaker_b`` the assistant, node id ``D1-3`` from ``dia_id`` ``D1:3``
  (``:`` cannot be cited in a memory source handle), ``created_at`` the
  session's date plus :data:`TURN_SECONDS` per turn, the speaker's name and
  the turn's other fields (image url, caption) as metadata; and the jsonl
  that ``scriptorium import jsonl`` reads;
- **questions**: the non-adversarial ones (category 5 left out) that have
  evidence; an evidence id that names no turn (the data has a few, e.g.
  ``D8:6; D9:17``) stays as it is and counts as missed, for memory and the
  baseline alike;
- **the two figures** exactly as the dataset README defines them:
  evidence recall (the fraction of evidence turns quoted in the block) and
  answer recall (the fraction of the answer's words, lower-cased
  alphanumeric runs minus :data:`STOP_WORDS` and :data:`PRONOUNS`, present
  in the block). A question whose answer has no word left counts 0, as the
  README's baseline figures do (759 of the 760 questions have words);
- **the baseline**: Okapi BM25 (rank-bm25's ``BM25Okapi``, k1 = 1.5,
  b = 0.75) over the conversation's raw turns, each rendered
  ``[<session date>] <speaker>: <text>``, tokens lower-cased alphanumeric
  runs stemmed with the English Snowball stemmer (PyStemmer); the block is
  filled with the best-scoring turns until the next one would not fit, a
  turn costing characters / 4 tokens (or tiktoken's count when installed:
  :func:`budget_counter`). This reproduces the README's table to the
  third decimal (0.513/0.510, 0.601/0.596, 0.682/0.688).

rank-bm25 and PyStemmer are the ``bench`` extra (``pip install -e
'.[bench]'``); only :class:`Bm25Baseline` needs them.
"""

from __future__ import annotations

import datetime
import importlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BUDGETS",
    "PRONOUNS",
    "STOP_WORDS",
    "Bm25Baseline",
    "Conversation",
    "Question",
    "Turn",
    "answer_recall",
    "answer_words",
    "budget_counter",
    "evidence_recall",
    "load_conversations",
    "pack",
    "session_time",
]

BUDGETS = (250, 500, 1000)
TURN_SECONDS = 30.0  # a turn's time: its session's date plus this much per turn before it

STOP_WORDS = frozenset({
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "and", "or", "is", "was", "were",
    "be", "been", "by", "with", "from", "as", "that", "this", "it", "its",
})
PRONOUNS = frozenset({
    "i", "me", "my", "mine", "myself", "you", "your", "yours", "yourself", "yourselves",
    "he", "him", "his", "himself", "she", "her", "hers", "herself", "we", "us", "our", "ours",
    "ourselves", "they", "them", "their", "theirs", "themselves",
})
_WORD = re.compile(r"[a-z0-9]+")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_TURN_FIELDS = ("speaker", "dia_id", "text")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric runs: the README's words."""
    return _WORD.findall(text.lower())


def answer_words(answer: object) -> list[str]:
    """The answer's words the answer figure counts (an answer may be a number: 2022)."""
    return [w for w in words(str(answer)) if w not in STOP_WORDS and w not in PRONOUNS]


def session_time(date: str) -> float:
    """Seconds since the epoch of a session date such as ``1:56 pm on 8 May, 2023`` (UTC)."""
    parsed = datetime.datetime.strptime(date.strip(), _DATE_FORMAT)
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def node_id(dia_id: str) -> str:
    """``D1:3`` -> ``D1-3``: a node id a memory source handle can cite."""
    return dia_id.replace(":", "-")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    role: str  # "user" (speaker_a) | "assistant" (speaker_b)
    text: str
    date: str  # the session's date as the data gives it
    created_at: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def node_id(self) -> str:
        return node_id(self.dia_id)

    def rendered(self) -> str:
        """How the baseline sees the turn: ``[<session date>] <speaker>: <text>``."""
        return f"[{self.date}] {self.speaker}: {self.text}"

    def import_line(self) -> dict[str, Any]:
        """The turn as one line of ``scriptorium import jsonl``."""
        return {**self.extra, "role": self.role, "content": self.text,
                "created_at": self.created_at, "id": self.node_id, "speaker": self.speaker}


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    evidence: tuple[str, ...]  # dia ids, as the data gives them
    category: int

    def evidence_nodes(self) -> tuple[str, ...]:
        return tuple(node_id(e) for e in self.evidence)


@dataclass(frozen=True)
class Conversation:
    name: str  # the file's stem: conv-26
    speaker_a: str
    speaker_b: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    @property
    def session_id(self) -> str:
        return f"locomo-{self.name}"

    def write_jsonl(self, path: Path) -> Path:
        with path.open("w", encoding="utf-8") as out:
            for turn in self.turns:
                out.write(json.dumps(turn.import_line(), ensure_ascii=False) + "\n")
        return path

    def sliced(self, sessions: int, questions: int | None = None) -> Conversation:
        """The first ``sessions`` sessions and the questions whose evidence all lies in them."""
        kept = tuple(t for t in self.turns if _session_number(t.dia_id) <= sessions)
        ids = {t.dia_id for t in kept}
        asked = tuple(q for q in self.questions if all(e in ids for e in q.evidence))
        return Conversation(self.name, self.speaker_a, self.speaker_b, kept,
                            asked[:questions] if questions is not None else asked)


def _session_number(dia_id: str) -> int:
    found = re.match(r"D(\d+):", dia_id)
    return int(found.group(1)) if found else 0


def _conversation(name: str, data: Mapping[str, Any]) -> Conversation:
    roles = {data["speaker_a"]: "user", data["speaker_b"]: "assistant"}
    turns: list[Turn] = []
    number = 1
    while f"session_{number}" in data:
        date = data[f"session_{number}_date_time"]
        start = session_time(date)
        for position, raw in enumerate(data[f"session_{number}"]):
            extra = {k: v for k, v in raw.items() if k not in _TURN_FIELDS}
            turns.append(Turn(raw["dia_id"], raw["speaker"], roles[raw["speaker"]],
                              raw["text"], date, start + position * TURN_SECONDS, extra))
        number += 1
    questions = tuple(
        Question(q["question"], str(q["answer"]), tuple(q["evidence"]), int(q["category"]))
        for q in data["qa"] if q.get("category") != 5 and q.get("evidence"))
    return Conversation(name, data["speaker_a"], data["speaker_b"], tuple(turns), questions)


def load_conversations(directory: Path, names: Iterable[str] | None = None
                       ) -> list[Conversation]:
    """Every ``conv-*.json`` of ``directory`` (or those ``names``), in name order."""
    wanted = set(names) if names is not None else None
    found = []
    for path in sorted(directory.glob("conv-*.json")):
        if wanted is None or path.stem in wanted:
            found.append(_conversation(path.stem, json.loads(path.read_text("utf-8"))))
    if not found:
        raise FileNotFoundError(f"{directory}: no conv-*.json (the LoCoMo files) there")
    return found


# -- the two figures -----------------------------------------------------------------


def evidence_recall(question: Question, quoted: Iterable[str]) -> float:
    """The fraction of the question's evidence turns among the node ids ``quoted``."""
    shown = set(quoted)
    return sum(node in shown for node in question.evidence_nodes()) / len(question.evidence)


def answer_recall(question: Question, block: str) -> float:
    """The fraction of the answer's words present in ``block``; 0 for an answer with none."""
    wanted = answer_words(question.answer)
    if not wanted:
        return 0.0
    present = set(words(block))
    return sum(word in present for word in wanted) / len(wanted)


# -- the baseline --------------------------------------------------------------------


def budget_counter() -> tuple[str, Callable[[str], float]]:
    """The README's token count: tiktoken's when installed, else characters / 4."""
    try:
        tiktoken = importlib.import_module("tiktoken")
        codec = tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001 - not installed, or its vocabulary cannot be loaded
        return "characters / 4", lambda text: len(text) / 4
    return "tiktoken cl100k_base", lambda text: float(len(codec.encode(text)))


def pack(ranked: Sequence[int], costs: Sequence[float], budget: float) -> list[int]:
    """The best-ranked items, in rank order, until the next one would not fit."""
    chosen: list[int] = []
    used = 0.0
    for index in ranked:
        if used + costs[index] > budget:
            break
        used += costs[index]
        chosen.append(index)
    return chosen


class Bm25Baseline:
    """BM25 over one conversation's raw turns, packed into a block of at most B tokens."""

    def __init__(self, conversation: Conversation,
                 counter: Callable[[str], float] | None = None) -> None:
        stemmer_module = importlib.import_module("Stemmer")  # PyStemmer, the bench extra
        bm25 = importlib.import_module("rank_bm25")
        self._stemmer = stemmer_module.Stemmer("english")
        self.turns = conversation.turns
        self._texts = [turn.rendered() for turn in self.turns]
        self._index = bm25.BM25Okapi([self._tokens(text) for text in self._texts])
        count = counter if counter is not None else budget_counter()[1]
        self._costs = [count(text) for text in self._texts]

    def _tokens(self, text: str) -> list[str]:
        stems: list[str] = self._stemmer.stemWords(words(text))
        return stems

    def ranked(self, query: str) -> list[int]:
        """Turn indexes, best first (ties in conversation order)."""
        scores = self._index.get_scores(self._tokens(query))
        return sorted(range(len(self.turns)), key=lambda i: -float(scores[i]))

    def block(self, query: str, budget: float) -> tuple[list[str], str]:
        """The node ids and the text of the block for ``query`` at ``budget`` tokens."""
        chosen = pack(self.ranked(query), self._costs, budget)
        return ([self.turns[i].node_id for i in chosen],
                "\n".join(self._texts[i] for i in chosen))

    def blocks(self, query: str, budgets: Sequence[int]) -> dict[int, tuple[list[str], str]]:
        ranked = self.ranked(query)  # one ranking, every budget
        out = {}
        for budget in budgets:
            chosen = pack(ranked, self._costs, budget)
            out[budget] = ([self.turns[i].node_id for i in chosen],
                           "\n".join(self._texts[i] for i in chosen))
        return out
