"""Hypothesis strategies for the workspace's files: a random topic that renders.

``topics()`` draws headings and paragraphs with block ids, citing footnotes
that each list one to three source links; only cited footnotes are kept, as
the grammar requires.
"""

from __future__ import annotations

from hypothesis import strategies as st

from memory.workspace._topics import Footnote, Heading, Paragraph, SourceLink, Topic

__all__ = ["topics"]

_words = st.text(alphabet="abcdefghij XYZ,.;:!()-'`*_0123456789", min_size=1, max_size=30)
_text = _words.map(lambda s: " ".join(s.split())).filter(
    lambda s: bool(s) and not s.startswith(("#", "[")) and "^" not in s
)
_hex = st.text(alphabet="0123456789abcdef", min_size=10, max_size=10)


@st.composite
def topics(draw: st.DrawFn) -> Topic:
    blocks: list[Heading | Paragraph] = []
    footnotes: dict[str, Footnote] = {}
    block_ids = iter(draw(st.lists(_hex.map(lambda h: h[:8]), min_size=40, max_size=40,
                                   unique=True)))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            blocks.append(Heading(draw(st.integers(1, 6)), draw(_text)))
            continue
        labels = []
        for _ in range(draw(st.integers(1, 3))):
            reuse: bool = draw(st.booleans())
            if footnotes and reuse:
                labels.append(draw(st.sampled_from(sorted(footnotes))))
                continue
            label = "e-" + draw(_hex)
            footnotes[label] = Footnote(
                label,
                draw(st.sampled_from(["2024", "2025-01", "2025-12-31", "undated"])),
                tuple(
                    SourceLink(draw(_text).replace("[", "").replace("]", "") or "x",
                               f"../s/{draw(_hex)}.md#source-{draw(_hex)}abcdef")
                    for _ in range(draw(st.integers(1, 3)))
                ),
            )
            labels.append(label)
        lines = [draw(_text) for _ in range(draw(st.integers(1, 3)))]
        lines[-1] += "".join(f"[^{label}]" for label in labels)
        ids = tuple(next(block_ids) for _ in range(draw(st.integers(1, 3))))
        blocks.append(Paragraph("\n".join(lines), ids))
    cited = {label for block in blocks if isinstance(block, Paragraph)
             for label in block.citations}
    return Topic(tuple(blocks), {k: v for k, v in footnotes.items() if k in cited})
