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

import torch

from tinyformer.setup import check_int

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


def english_split(every: int = 10) -> tuple[str, str]:
    """:func:`english_text` split by paragraphs into a training and a
    validation text: every ``every``-th paragraph (the 10th, 20th, …) goes
    to validation, so both halves cover every topic. Deterministic."""
    every = check_int("every", every, minimum=2)
    paragraphs = english_text().split("\n")
    val = [p for i, p in enumerate(paragraphs, 1) if i % every == 0]
    train = [p for i, p in enumerate(paragraphs, 1) if i % every != 0]
    return "\n".join(train), "\n".join(val)


def _as_stream(name: str, data) -> torch.Tensor:
    if isinstance(data, (list, tuple)):
        data = torch.tensor(data, dtype=torch.long)
    if not isinstance(data, torch.Tensor) or data.dim() != 1:
        got = (tuple(data.shape) if isinstance(data, torch.Tensor)
               else type(data).__name__)
        raise ValueError(f"{name} must be a 1-D tensor (or list) of token "
                         f"ids, got {got}")
    if data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got {data.dtype}")
    return data


def pack_documents(docs, eot_id: int, block_size: int | None = None):
    """Documents (lists or 1-D tensors of token ids) joined into one stream,
    each followed by the end-of-text token ``eot_id``, so that a model
    learns where a text ends and never mistakes the next document for a
    continuation. With ``block_size``, the stream is cut into windows of
    ``block_size + 1`` tokens (inputs and, shifted by one, targets), the
    last token of each window the first of the next; the tail that does not
    fill a window is dropped. Returns ``(n_tokens,)`` or
    ``(n_windows, block_size + 1)``, int64."""
    eot_id = check_int("eot_id", eot_id, minimum=0)
    if not isinstance(docs, (list, tuple)) or not docs:
        raise ValueError("docs must be a non-empty list of documents")
    eot = torch.tensor([eot_id])
    parts = []
    for i, doc in enumerate(docs):
        parts += [_as_stream(f"docs[{i}]", doc).long(), eot]
    stream = torch.cat(parts)
    if block_size is None:
        return stream
    block_size = check_int("block_size", block_size)
    n = (len(stream) - 1) // block_size
    if n < 1:
        raise ValueError(f"the documents hold {len(stream)} tokens with their "
                         f"end-of-text tokens, too few for one window of "
                         f"block_size + 1 = {block_size + 1}")
    starts = torch.arange(n) * block_size
    return stream[starts[:, None] + torch.arange(block_size + 1)]


def get_batch(data, batch_size: int, block_size: int,
              generator: torch.Generator | None = None, device=None):
    """A random batch of windows from the 1-D token stream ``data``: inputs
    ``x`` ``(batch_size, block_size)`` and targets ``y``, the same windows
    shifted by one token, so that ``y[b, t]`` is the token after
    ``x[b, t]``. Window starts are drawn with ``generator`` (a CPU
    ``torch.Generator``: the same seed gives the same batches on any
    device); the batch is moved to ``device``."""
    data = _as_stream("data", data)
    batch_size = check_int("batch_size", batch_size)
    block_size = check_int("block_size", block_size)
    if len(data) < block_size + 1:
        raise ValueError(f"block_size={block_size} needs at least "
                         f"{block_size + 1} tokens of data (inputs and the "
                         f"target after them), got {len(data)}")
    starts = torch.randint(len(data) - block_size, (batch_size,),
                           generator=generator)
    rows = starts[:, None] + torch.arange(block_size + 1)    # (B, T + 1)
    window = data[rows].long()
    x, y = window[:, :-1], window[:, 1:]
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


__all__ = ["WORD_PATTERN", "english_split", "english_text", "get_batch",
           "pack_documents", "words"]
