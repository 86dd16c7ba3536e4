"""The optional embedding backend, with a tiny model the test builds (nothing downloaded).

The model maps words to concept axes (pets, drinks) and hashes every other
word to one of a few more axes: enough to find a turn that shares no word
with the question, which BM25 alone cannot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from memory.ledger import SourceRecord, estimate_tokens
from memory.ledger._ledger import WritePolicy
from memory.recall import Recall, RecallIndex, fuse_rrf
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.workspace import append_records
from store import DurableFiles

CONCEPTS = {"pet": 0, "pets": 0, "turtle": 0, "turtles": 0, "dog": 0,
            "tea": 1, "sencha": 1, "coffee": 1}


STOP = {"which", "does", "he", "i", "my", "to", "the", "in", "was", "and", "we", "a", "with"}


class TinyModel:
    """Bag of content words over 2 concept axes and 62 hashed ones."""

    def __init__(self, name: str = "tiny-concepts-64") -> None:
        self.name = name
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        vectors = []
        for text in texts:
            vector = [0.0] * 64
            for word in re.findall(r"[a-z]+", text.lower()):
                if word in STOP:
                    continue
                axis = CONCEPTS.get(word)
                if axis is None:
                    axis = 2 + hashlib.sha256(word.encode()).digest()[0] % 62
                vector[axis] += 1.0
            vectors.append(vector)
        return vectors


def archive(memory: Path) -> None:
    texts = ["I took my turtles to the beach in Tampa.", "The weather was warm and sunny.",
             "We watched a film about space.", "Dinner was pasta with friends."]
    records = [SourceRecord("chat", f"n{i}", "user", text, 1_700_000_000.0 + i, "Owner")
               for i, text in enumerate(texts)]
    append_records(str(memory), "chat", records, DurableFiles())


async def test_a_turn_sharing_no_word_is_found_only_with_the_backend(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    archive(memory)
    plain = Recall(str(memory), counter=estimate_tokens)
    assert not any(h.node_id == "n0" for h in await plain.recall("Which pets does he own?"))
    plain.close()
    model = TinyModel()
    recall = Recall(str(memory), counter=estimate_tokens, embedder=model)
    hits = await recall.recall("Which pets does he own?", k=2)
    assert hits and hits[0].node_id == "n0"
    context = await recall.context("Which pets does he own?", budget_tokens=30)
    assert ("chat", "n0") in context.quoted and context.tokens <= 30
    recall.close()


def test_another_model_rebuilds_the_vectors(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    archive(memory)
    first = RecallIndex(str(memory), embedder=TinyModel("a"))
    first.sync()
    assert first.db.execute("SELECT count(*) FROM vector").fetchone()[0] == 4
    first.close()
    second = RecallIndex(str(memory), embedder=TinyModel("b"))
    assert second.count() == 0  # vectors of model "a" are not comparable: made anew
    second.sync()
    assert second.db.execute("SELECT count(*) FROM vector").fetchone()[0] == 4
    second.close()
    without = RecallIndex(str(memory))
    assert without.count() == 0
    without.sync()
    assert without.db.execute("SELECT count(*) FROM vector").fetchone()[0] == 0
    assert without.nearest("pets", 5) == []
    without.close()


def test_rrf_sums_reciprocal_ranks_and_keeps_first_seen_order_on_ties() -> None:
    fused = fuse_rrf([[1, 2, 3], [3, 1]], k=60)
    assert [ident for ident, _ in fused] == [1, 3, 2]
    assert fused[0][1] == 1 / 61 + 1 / 62
    assert fuse_rrf([[5], [6]]) == [(5, 1 / 61), (6, 1 / 61)]


async def test_the_runtime_uses_the_configured_backend(tmp_path: Path) -> None:
    model = TinyModel()
    config = RuntimeConfig(policy=WritePolicy(threshold=8000), writer_workers=1,
                           counter=estimate_tokens, recall_embedder=model)
    async with open_runtime(tmp_path, config=config) as rt:
        archive(Path(rt.memory_dir))
        hits = await rt.recall("Which pets does he own?", k=2)
        assert hits and hits[0].node_id == "n0" and model.calls > 0
