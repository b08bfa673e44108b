"""Corpora that need no download.

Chapter 5 needs real English to decode from; Chapter 6 builds the rest of
this module (a synthetic language, packing, batches).

:func:`english_text` is the prose of the documentation that every CPython
installation ships in ``pydoc_data`` (the text of ``help("assert")`` and the
other topics): paragraphs of plain sentences, with the code examples, tables
and headings left out, in a fixed order, so it is the same on every machine
running the same Python. :func:`words` splits it into lower-case words and
the two commonest punctuation marks.
"""

from __future__ import annotations

import re

WORD_PATTERN = re.compile(r"[a-z]+|[.,]")


def _is_prose(lines: list[str]) -> bool:
    """A paragraph of sentences: no indented line (code, a grammar rule),
    no interpreter prompt, no heading underline or table rule."""
    return (bool(lines) and not any(line[:1].isspace() or line.startswith(">>>") for line in lines)
            and not any(re.search(r"[*=~^-]{3}", line) for line in lines))


def english_text() -> str:
    """The prose paragraphs of CPython's ``pydoc_data`` topics, one per line,
    topics in alphabetical order (about 200,000 characters)."""
    from pydoc_data import topics  # part of the standard library

    paragraphs = []
    for name in sorted(topics.topics):
        for block in re.split(r"\n\s*\n", topics.topics[name]):
            lines = [line for line in block.split("\n") if line.strip()]
            if _is_prose(lines) and len(block) > 60:
                paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n".join(paragraphs)


def words(text: str) -> list[str]:
    """Lower-case words and the marks ``.`` and ``,``; everything else
    (digits, quotes, brackets) is dropped."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return WORD_PATTERN.findall(text.lower())


__all__ = ["WORD_PATTERN", "english_text", "words"]
