"""An optional second ranking: units near the query in an embedding space (off by default).

BM25 cannot find a turn that shares no word with the question ("pets" and
"turtles"). An :class:`Embedder` (a model behind one method; none ships: an
adapter for model2vec or fastembed is the caller's, so nothing is downloaded
here) maps texts to vectors; the index stores one unit-length vector per unit
and the query's nearest units join BM25's candidates, the two rankings fused
by reciprocal rank fusion (:func:`fuse_rrf`). Pure functions, plus the protocol.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["RRF_K", "Embedder", "fuse_rrf", "pack_vector", "unit_vector", "unpack_vector"]

RRF_K = 60


class Embedder(Protocol):
    """Texts to vectors of one dimension. ``name`` names the model: another name rebuilds."""

    name: str

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """One vector per text, in order (called from a worker thread)."""
        ...


def unit_vector(vector: Iterable[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero), so a dot product is the cosine."""
    values = [float(v) for v in vector]
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values] if norm > 0 else values


def pack_vector(vector: Iterable[float]) -> bytes:
    return array("f", unit_vector(vector)).tobytes()


def unpack_vector(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    return values


def fuse_rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: ``(id, sum over rankings of 1 / (k + rank))``, best first.

    Ties keep the order in which ids were first seen (the first ranking first).
    """
    totals: dict[int, float] = {}
    for ranking in rankings:
        for rank, ident in enumerate(ranking, start=1):
            totals[ident] = totals.get(ident, 0.0) + 1.0 / (k + rank)
    order = {ident: n for n, ident in enumerate(totals)}
    return sorted(totals.items(), key=lambda item: (-item[1], order[item[0]]))
