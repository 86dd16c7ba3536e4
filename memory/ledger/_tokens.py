"""Token counting for batch sizes and triggers.

SPEC §6.3: tokens are counted per record with a pluggable counter; the
default is a fast estimate, and tiktoken is used when it is installed. The
count only decides *when* to write and how big a batch is, never what is
written, so an estimate is good enough and being fast matters more: the
ledger counts every owed record after every turn.

The estimate is one UTF-8 encode: a token is about four bytes of English
(common BPE vocabularies average ~4 characters per token) and about one CJK
character (three bytes, counted as 3/4 here, which errs towards smaller
batches). tiktoken's encodings download their vocabulary on first use; when
that fails (no network, no cache) the estimate is used instead, so counting
never blocks or fails a write.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["TokenCounter", "default_counter", "estimate_tokens", "tiktoken_counter"]

TokenCounter = Callable[[str], int]

TIKTOKEN_ENCODING = "cl100k_base"


def estimate_tokens(text: str) -> int:
    """About one token per four UTF-8 bytes, at least one for non-empty text."""
    if not text:
        return 0
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def tiktoken_counter(encoding: str = TIKTOKEN_ENCODING) -> TokenCounter | None:
    """A counter backed by tiktoken, or None if it is not installed or cannot load ``encoding``."""
    try:
        tiktoken = importlib.import_module("tiktoken")
        codec = tiktoken.get_encoding(encoding)
    except Exception:  # noqa: BLE001 (ImportError, or a vocabulary that cannot be fetched)
        return None

    def count(text: str) -> int:
        return len(codec.encode(text, disallowed_special=()))

    return count


def default_counter() -> TokenCounter:
    """tiktoken when usable, else :func:`estimate_tokens`."""
    return tiktoken_counter() or estimate_tokens
