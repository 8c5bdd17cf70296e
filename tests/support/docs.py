"""The examples of README.md and the guides in docs/, by id, for the tests that run them.

Every fenced block in those pages is an example: the line right before it names it,
``<!-- example: ID -->`` (an HTML comment, invisible on the rendered page), and a test runs or
checks it through ``example(ID)``. ``tests/docs/test_docs_site.py`` fails when a block has no id,
when an id is used twice, or when no test asks for an id, so no example goes untested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# any fenced block, indented (in a list) or not, with backticks or tildes: each must be a MARKED one
FENCE = re.compile(r"^[ \t]*(```|~~~)(\w*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
MARKED = re.compile(r"^<!-- example: ([\w-]+) -->\n```(\w*)\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    """One fenced block: its id, the page that holds it, its language and its code as written."""

    id: str
    page: Path
    lang: str
    code: str


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def text(page: str | Path) -> str:
    """A page's text: ``page`` is a path, or a name such as ``"deployment.md"`` under docs/."""
    path = Path(page)
    return (path if path.is_absolute() else DOCS / path).read_text(encoding="utf-8")


@cache
def examples() -> dict[str, Example]:
    """Every marked example of every page, by id (a duplicate id raises ``ValueError``)."""
    found: dict[str, Example] = {}
    for page in pages():
        for id_, lang, code in MARKED.findall(page.read_text(encoding="utf-8")):
            if id_ in found:
                raise ValueError(f"example id {id_!r} in {page.name} is also in {found[id_].page.name}")
            found[id_] = Example(id_, page, lang, code)
    return found


def example(id_: str, lang: str | None = None) -> str:
    """The code of example ``id_`` as written (its language checked when ``lang`` is given)."""
    found = examples()[id_]
    if lang is not None:
        assert found.lang == lang, f"example {id_!r} is {found.lang!r}, not {lang!r}"
    return found.code


def section(page: str | Path, title: str) -> str:
    """The text under the heading ``title`` of ``page``, up to the next heading of its level or above."""
    body = text(page)
    match = re.search(rf"^(#+) {re.escape(title)}[ \t]*\n", body, flags=re.M)
    assert match, f"{page} has no heading {title!r}"
    level = len(match.group(1))
    rest = body[match.end():]
    # headings only outside fenced blocks (a bash comment line starts with '#' too)
    outside = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), rest)
    end = re.search(rf"^#{{1,{level}}} ", outside, flags=re.M)
    return rest[: end.start()] if end else rest
