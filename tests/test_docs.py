"""The README and docs/ kept usable: every relative link reaches a file (and, with `#anchor`,
a heading of it), the README stays a front page, and no page for a reader grows a wall of a
paragraph again (the README once had 8,888 words and a paragraph of 461)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Measured figures with their reasoning: links are checked, paragraphs are not.
LONG_FORM = {"SCALING.md"}
README_MAX_WORDS = 1600
PARAGRAPH_MAX_WORDS = 160
# the map: a diagram and one short paragraph per package (it once had a cell of 1,301 words)
MAP_PARAGRAPH_MAX_WORDS = 120

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
# [text](target) and ![alt](target), the text may hold one level of brackets; an optional title.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _without_code(text: str) -> str:
    """Fenced blocks emptied (their lines kept, so line breaks stay) and code spans replaced."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("code", text)


def links(text: str) -> list[str]:
    text = _without_code(text)
    return INLINE_LINK.findall(text) + REFERENCE.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and emphasis as shown), lowercased,
    punctuation but '-' and '_' dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(re.sub(FENCE, "", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    problems = []
    for target in links(text):
        if SCHEME.match(target):  # http(s), mailto and any other scheme: not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{target}: no file {file}")
            continue
        if not file.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append(f"{target}: no heading with the anchor #{anchor} in {_name(file)}")
    return problems


def paragraphs(text: str) -> list[str]:
    """Blocks separated by blank lines, fenced code blocks and table rows left out."""
    blocks = re.split(r"\n[ \t]*\n", FENCE.sub("\n\n", text))
    out = []
    for block in blocks:
        lines = [line for line in block.splitlines() if not line.lstrip().startswith("|")]
        if any(line.strip() for line in lines):
            out.append("\n".join(lines))
    return out


def test_the_checks_see_what_they_check():
    """A link finder that matched nothing would pass every page."""
    sample = ("See [a](docs/a.md#b-c) and ![pic](docs/p.png \"t\"), [`x`](../x.py), "
              "<http://h>, `[no](code.md)`.\n\n```\n[no](fenced.md)\n```\n[r]: ref.md\n")
    assert links(sample) == ["docs/a.md#b-c", "docs/p.png", "../x.py", "ref.md"]
    assert slug("`VARIANTS` (optional)") == "variants-optional"
    assert slug("Predict, then reveal") == "predict-then-reveal"
    assert slug("Students' runs") == "students-runs"
    assert anchors("# A\n## A\n```\n# not\n```\n") == {"a", "a-1"}
    assert [len(p.split()) for p in paragraphs("one two\n\n| a | b |\n|---|---|\n\nthree\n")] == [
        2, 1]
    assert len(links((ROOT / "README.md").read_text())) >= 10


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_reaches_a_file_and_a_heading(page):
    problems = broken_links(page)
    assert not problems, f"{_name(page)} has broken links:\n" + "\n".join(problems)


def test_the_readme_is_a_front_page():
    words = len((ROOT / "README.md").read_text().split())
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words (at most {README_MAX_WORDS}): move the detail to a page "
        "in docs/ and link it")


@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in LONG_FORM], ids=_name)
def test_no_paragraph_is_a_wall(page):
    most = MAP_PARAGRAPH_MAX_WORDS if page.name == "ARCHITECTURE.md" else PARAGRAPH_MAX_WORDS
    walls = [f"{len(p.split())} words: {' '.join(p.split()[:8])} ..."
             for p in paragraphs(page.read_text()) if len(p.split()) > most]
    assert not walls, (f"{_name(page)} has paragraphs over {most} words "
                       "(split them, or make a list or a table):\n" + "\n".join(walls))
