"""Every ```python block of README.md and docs/*.md runs as written.

A newcomer pastes these first; a snippet that does not run is the first
thing they meet. Each block is a whole program, run in a fresh interpreter
in a temporary directory, and must exit 0.

A block that is deliberately not a program (a signature, a fragment) is
fenced ```python no-run```: shown as Python, not run. Keep those rare; any
other fence whose language starts with "py" is refused below, so a block
cannot slip out of this test by its spelling.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
RUN, NO_RUN = "python", "python no-run"
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with their info strings."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    opened: tuple[int, str, str] | None = None  # (line, fence, info)
    body: list[str] = []
    for number, text in enumerate(lines, start=1):
        match = _FENCE.match(text)
        if opened is None:
            if match:
                opened, body = (number, match.group(1), match.group(2).strip()), []
        elif (match and not match.group(2) and match.group(1)[0] == opened[1][0]
              and len(match.group(1)) >= len(opened[1])):  # CommonMark's closing fence
            blocks.append(Block(path, opened[0], opened[2], "\n".join(body) + "\n"))
            opened = None
        else:
            body.append(text)
    assert opened is None, f"{path.relative_to(ROOT)}:{opened[0]}: a fence is never closed"
    return blocks


def python_blocks() -> list[Block]:
    return [block for path in DOCUMENTS for block in fenced_blocks(path)
            if block.info.split(" ")[0].lower().startswith("py")]


def run_program(code: str, where: Path) -> subprocess.CompletedProcess[str]:
    script = where / "snippet.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], cwd=where, capture_output=True,
                          text=True, timeout=300, check=False)


BLOCKS = python_blocks()


def test_the_readme_s_snippets_are_found() -> None:
    """A collector that finds nothing would pass every snippet: the README has two programs."""
    assert sum(1 for b in BLOCKS if b.path.name == "README.md" and b.info == RUN) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_a_python_block_is_fenced_to_run_or_marked_not_to(block: Block) -> None:
    assert block.info in (RUN, NO_RUN), (
        f"{block.name}: fence it ```{RUN}``` (a whole program, run by this test) or "
        f"```{NO_RUN}``` (deliberately not a program), not ```{block.info}```")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.info == RUN], ids=lambda b: b.name)
def test_a_python_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    result = run_program(block.code, tmp_path)
    assert result.returncode == 0, (
        f"{block.name} does not run as written (exit {result.returncode}):\n{result.stderr}")


def test_a_broken_program_fails_the_runner(tmp_path: Path) -> None:
    """The runner itself reports a snippet that fails (what a planted typo would do)."""
    assert run_program("import anyio\nanyio.rnu(print)\n", tmp_path).returncode != 0


def test_fences_are_read_as_markdown_reads_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nprint(1)\n```\n````md\n```python\nx\n```\n````\n"
                    "```python no-run\ndef f(): ...\n```\n", encoding="utf-8")
    found = [(b.info, b.code) for b in fenced_blocks(page)]
    assert found == [("python", "print(1)\n"), ("md", "```python\nx\n```\n"),
                     ("python no-run", "def f(): ...\n")]
