"""Corpora that need no download.

Chapter 5 needs real English to decode from; Chapter 6 builds the rest of
this module (a synthetic language, packing, batches).

:func:`english_text` is the prose of the documentation that CPython ships
in ``pydoc_data`` (the text of ``help("assert")`` and the other topics):
paragraphs of plain sentences, with the code examples, tables and headings
left out, in a fixed order. That text changes from one Python release to the
next (3.12's is about 16 % longer in the validation half), so the library
ships the extraction made from Python 3.11.7's ``pydoc_data``
(``tinyformer/corpora/python-docs-3.11.txt``, Python Software Foundation
License; :func:`english_text_from_pydoc` remakes it) and every Python, Colab's
included, reads the same corpus. :func:`words` splits it into lower-case
words and the two commonest punctuation marks.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

import torch

from tinyformer.validation import check_int

#: What :func:`words` keeps: runs of lower-case letters, and the marks ``.`` and ``,``.
WORD_PATTERN = re.compile(r"[a-z]+|[.,]")


def _is_prose(lines: list[str]) -> bool:
    """A paragraph of sentences: no indented line (code, a grammar rule),
    no interpreter prompt, no heading underline or table rule."""
    return (bool(lines) and not any(line[:1].isspace() or line.startswith(">>>") for line in lines)
            and not any(re.search(r"[*=~^-]{3}", line) for line in lines))


#: The corpus file shipped with the library, and its SHA-256 (tests/test_training.py checks both).
ENGLISH_FILE = "python-docs-3.11.txt"
ENGLISH_SHA256 = "3131f01b5836bd537cc48fdb52dc57a6f0a641a84650ef0afd31d92d9d8fa025"


def english_text() -> str:
    """The prose paragraphs of CPython 3.11's ``pydoc_data`` topics, one per
    line, topics in alphabetical order (about 200,000 characters), read from
    the copy shipped with the library, so that it is the same on every
    Python version."""
    from importlib import resources

    return (resources.files("tinyformer") / "corpora" / ENGLISH_FILE).read_text(encoding="utf-8")


def english_text_from_pydoc() -> str:
    """:func:`english_text` extracted from this Python's own ``pydoc_data``
    (the same text on Python 3.11; another on other releases)."""
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
    to validation, so both halves come from the whole length of the text.
    Deterministic."""
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
    each followed by the end-of-text token ``eot_id``, which marks where a
    text ends (attention still sees across it: the model must learn what the
    mark means). With ``block_size``, the stream is cut into windows of
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


# --------------------------------------------------------------------------- a synthetic language

#: Winograd-style templates: the pronoun "it" refers to the first or the second
#: noun depending on the adjective at the end (Levesque et al., 2012). Each is
#: ``(template, first nouns, second nouns, adjectives for the first, for the second)``.
PRONOUN_TEMPLATES = [
    ("the {a} did not cross the {b} because it was too {adj} .",
     ["chicken", "dog", "cat", "horse", "cow", "goat", "sheep", "fox", "duck",
      "pig"],
     ["road", "river", "street", "bridge", "field", "stream", "square", "valley"],
     ["tired", "scared", "slow", "lazy", "old", "weak"],
     ["wide", "busy", "long", "wet", "steep", "icy"]),
    ("the {a} did not fit in the {b} because it was too {adj} .",
     ["trophy", "box", "table", "piano", "sofa", "bed", "lamp", "chair"],
     ["suitcase", "car", "room", "van", "hall", "lift", "bag", "cupboard"],
     ["big", "large", "tall", "wide", "heavy"],
     ["small", "narrow", "tiny", "short", "full"]),
    ("the {a} could not lift the {b} because it was too {adj} .",
     ["man", "woman", "boy", "girl", "child", "farmer", "porter", "nurse"],
     ["rock", "sack", "crate", "log", "barrel", "stone", "anvil", "trunk"],
     ["weak", "tired", "small", "young", "ill"],
     ["heavy", "big", "large", "bulky", "massive"]),
]
#: The pairs the relation sentences state, by relation: ``"capital"`` (country, city),
#: ``"gender"`` (male, female) and ``"plural"`` (singular, plural).
RELATIONS = {
    "capital": [("france", "paris"), ("italy", "rome"), ("spain", "madrid"),
                ("germany", "berlin"), ("japan", "tokyo"), ("egypt", "cairo"),
                ("peru", "lima"), ("kenya", "nairobi"), ("canada", "ottawa"),
                ("greece", "athens"), ("norway", "oslo"), ("poland", "warsaw"),
                ("chile", "santiago"), ("india", "delhi"), ("china", "beijing"),
                ("russia", "moscow")],
    "gender": [("king", "queen"), ("man", "woman"), ("boy", "girl"),
               ("father", "mother"), ("brother", "sister"),
               ("uncle", "aunt"), ("prince", "princess"), ("son", "daughter"),
               ("husband", "wife"), ("actor", "actress"), ("nephew", "niece"),
               ("waiter", "waitress")],
    "plural": [("cat", "cats"), ("dog", "dogs"), ("mouse", "mice"),
               ("child", "children"), ("box", "boxes"), ("city", "cities"),
               ("foot", "feet"), ("tooth", "teeth"), ("wolf", "wolves"),
               ("leaf", "leaves"), ("goose", "geese"), ("bus", "buses")],
}
RELATION_TEMPLATES = {
    "capital": "the capital of {x} is {y} .",
    "gender": "he is a {x} and she is a {y} .",
    "plural": "one {x} , two {y} .",
}
#: The same relations said the other way (``synthetic_corpus(..., relation_style="context")``): a
#: sentence names one side of a pair only, in a frame of its own side (a nation / a city), beside a
#: word the two sides share (the language spoken there). Partners never meet in one sentence; what
#: they have in common is a context, which is what the distributional hypothesis can pick up.
CONTEXT_TEMPLATES = {
    "capital": ("the proud nation of {w} speaks {z} .",
                "the crowded city of {w} speaks {z} ."),
    "gender": ("he is a {w} and he loves {z} .",
               "she is a {w} and she loves {z} ."),
    "plural": ("there is one {w} near the {z} .",
               "there are two {w} near the {z} ."),
}
#: The word each pair of :data:`RELATIONS` shares in :data:`CONTEXT_TEMPLATES`' sentences, by
#: relation, in the order of its pairs.
SHARED_CONTEXT = {
    # the language spoken there: Spain and Chile share theirs, as they do in the world
    "capital": ["french", "italian", "spanish", "german", "japanese", "arabic", "quechua",
                "swahili", "english", "greek", "norwegian", "polish", "spanish", "hindi",
                "mandarin", "russian"],
    "gender": ["crowns", "tea", "games", "gardens", "music", "boats", "horses", "books",
               "dancing", "films", "kites", "coffee"],
    "plural": ["sofa", "gate", "wall", "swing", "door", "coast", "bed", "sink", "hill", "path",
               "pond", "stop"],
}
FILLER = ["the", "sun", "rose", "over", "a", "quiet", "town", "and", "people",
          "walked", "to", "market", "with", "bread", "in", "their", "bags",
          "while", "birds", "sang", "near", "old", "walls"]


@dataclass
class SyntheticCorpus:
    """Text generated from a small grammar, with its ground truth.

    ``text``: the sentences, one per line, lower case, words and
    punctuation separated by spaces. ``pronouns``: one dict per pronoun
    sentence: ``line``, ``start`` and ``end`` (character offsets of "it" in
    ``text``), ``antecedent`` (the noun "it" refers to), ``other`` (the
    other noun), ``adjective`` (the word that decides). ``relations``: the
    pairs each relation sentence states, by name (``"capital"``,
    ``"gender"``, ``"plural"``), as in :data:`RELATIONS`. ``repeats``: one
    dict per repeated-span sentence: ``line``, ``span`` (the words),
    ``first`` and ``second`` (character offsets of its two copies)."""

    text: str
    pronouns: list[dict] = field(default_factory=list)
    relations: dict = field(default_factory=dict)
    repeats: list[dict] = field(default_factory=list)


def synthetic_corpus(n_sentences: int, seed: int = 0, mix=(0.4, 0.3, 0.2, 0.1),
                     relation_style: str = "cooccur",
                     referent_clause: bool = False) -> SyntheticCorpus:
    """``n_sentences`` sentences of a synthetic language, seeded: pronoun
    sentences whose antecedent is decided by a later word, relation
    sentences (capitals, male and female forms, singular and plural), a
    random span of words said twice, and plain filler, in the proportions
    ``mix``. The same ``seed`` gives the same corpus on every machine.

    Two options change the language (both off by default, so the default
    corpus never changes). ``relation_style="context"`` states each pair
    without its partner: a sentence names one side in a frame of its own
    (:data:`CONTEXT_TEMPLATES`) beside a word the two sides share
    (:data:`SHARED_CONTEXT`), instead of ``"cooccur"``'s one sentence with
    both. ``referent_clause=True`` follows each pronoun sentence with the
    clause ``it means the <antecedent> .``, so that a next-token predictor
    has to work out what "it" refers to; the dict of such a sentence also
    holds ``referent`` (the character offset of the named noun)."""
    n_sentences = check_int("n_sentences", n_sentences)
    check_int("seed", seed, minimum=None)
    _check_mix(mix)
    if relation_style not in ("cooccur", "context"):
        raise ValueError(f"relation_style must be 'cooccur' or 'context', got {relation_style!r}")
    if not isinstance(referent_clause, bool):
        raise TypeError(f"referent_clause must be True or False, got {referent_clause!r}")
    rng = random.Random(seed)
    lines, corpus, offset = [], SyntheticCorpus(text=""), 0
    corpus.relations = {name: [] for name in RELATIONS}
    for i in range(n_sentences):
        kind = rng.choices(("pronoun", "relation", "repeat", "filler"), mix)[0]
        if kind == "pronoun":
            template, firsts, seconds, adj_a, adj_b = rng.choice(PRONOUN_TEMPLATES)
            a, b = rng.choice(firsts), rng.choice(seconds)
            first = rng.random() < 0.5        # which noun the adjective fits
            adj = rng.choice(adj_a if first else adj_b)
            line = template.format(a=a, b=b, adj=adj)
            at = line.index(" it ") + 1
            info = dict(line=i, start=offset + at, end=offset + at + 2,
                        antecedent=a if first else b, other=b if first else a, adjective=adj)
            if referent_clause:
                line += f" it means the {info['antecedent']} ."
                info["referent"] = offset + len(line) - len(info["antecedent"]) - 2
            corpus.pronouns.append(info)
        elif kind == "relation":
            name = rng.choice(sorted(RELATIONS))
            j = rng.randrange(len(RELATIONS[name]))
            x, y = RELATIONS[name][j]
            if relation_style == "cooccur":
                line = RELATION_TEMPLATES[name].format(x=x, y=y)
            else:                              # one side only, beside the pair's shared word
                side = rng.randrange(2)
                line = CONTEXT_TEMPLATES[name][side].format(w=(x, y)[side],
                                                            z=SHARED_CONTEXT[name][j])
            corpus.relations[name].append((x, y))
        elif kind == "repeat":
            span = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 6)))
            line = f"remember {span} . again {span} ."
            first = offset + len("remember ")
            second = offset + line.index(" again ") + len(" again ")
            corpus.repeats.append(dict(line=i, span=span, first=first, second=second))
        else:
            line = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 10))) + " ."
        lines.append(line)
        offset += len(line) + 1                # the newline
    corpus.text = "\n".join(lines)
    return corpus


def _check_mix(mix) -> None:
    if len(mix) != 4 or any(m < 0 for m in mix) or sum(mix) <= 0:
        raise ValueError(f"mix must be 4 non-negative weights (pronoun, relation, repeat, "
                         f"filler), got {mix!r}")


def synthetic_entropy(mix=(0.4, 0.3, 0.2, 0.1), relation_style: str = "cooccur",
                      referent_clause: bool = False) -> dict:
    """The entropy of :func:`synthetic_corpus`'s language, computed from its grammar: the floor
    below which no model's loss can go, however large or well trained.

    Sentences are drawn independently, and each sentence's words determine every choice that made
    it (its kind, template, words and length), so the entropy per sentence is
    ``H(kind) + Σ_kind P(kind)·H(choices | kind)``; divided by the expected number of tokens per
    sentence (the tokens of :func:`words`: words, ``.`` and ``,``; no newline), it is the
    entropy rate in nats per token, the best loss a predictor that has read every earlier
    sentence can reach. Returns ``{"nats_per_token", "nats_per_sentence", "tokens_per_sentence"}``.
    ``relation_style`` and ``referent_clause`` are :func:`synthetic_corpus`'s options: the
    referent clause adds five tokens and no entropy (the sentence before it decides it)."""
    _check_mix(mix)
    if relation_style not in ("cooccur", "context"):
        raise ValueError(f"relation_style must be 'cooccur' or 'context', got {relation_style!r}")
    p = [m / sum(mix) for m in mix]
    log = math.log
    h_kind = -sum(q * log(q) for q in p if q > 0)
    h_pron, l_pron = log(len(PRONOUN_TEMPLATES)), 0.0  # the template, then its nouns, which fits, adjective
    for template, firsts, seconds, adj_a, adj_b in PRONOUN_TEMPLATES:
        h_pron += (log(len(firsts)) + log(len(seconds)) + log(2)
                   + (log(len(adj_a)) + log(len(adj_b))) / 2) / len(PRONOUN_TEMPLATES)
        l_pron += len(words(template.format(a="a", b="b", adj="c"))) / len(PRONOUN_TEMPLATES)
    if referent_clause:
        l_pron += len(words("it means the x ."))
    h_rel = log(len(RELATIONS)) + sum(log(len(pairs)) for pairs in RELATIONS.values()) / len(RELATIONS)
    if relation_style == "cooccur":
        l_rel = sum(len(words(RELATION_TEMPLATES[name].format(x="x", y="y")))
                    for name in RELATIONS) / len(RELATIONS)
    else:                                       # which side is named: one more fair coin
        h_rel += log(2)
        l_rel = sum(len(words(t.format(w="w", z="z"))) for name in RELATIONS
                    for t in CONTEXT_TEMPLATES[name]) / (2 * len(RELATIONS))
    span = (3 + 6) / 2                          # a repeated span has 3 to 6 words; its copy adds nothing
    h_rep, l_rep = log(4) + span * log(len(FILLER)), 4 + 2 * span
    filler = (5 + 10) / 2                       # 5 to 10 words and a period
    h_fill, l_fill = log(6) + filler * log(len(FILLER)), filler + 1
    h = h_kind + p[0] * h_pron + p[1] * h_rel + p[2] * h_rep + p[3] * h_fill
    n = p[0] * l_pron + p[1] * l_rel + p[2] * l_rep + p[3] * l_fill
    return {"nats_per_token": h / n, "nats_per_sentence": h, "tokens_per_sentence": n}


#: Public corpora for :func:`load_corpus`, by name: ``(url, "sha256:<hex>")``; downloaded only
#: on request, verified by checksum and cached.
CORPORA = {
    "tiny-shakespeare": (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
        "tinyshakespeare/input.txt",
        "sha256:86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}


def load_corpus(name: str, cache_dir=None) -> str:
    """A public corpus by name (see :data:`CORPORA`), downloaded once with
    ``pooch``, checked against its SHA-256 and cached (in ``cache_dir``, by
    default pooch's cache folder for ``tinyformer``). Nothing in the book's
    tests needs one; :func:`english_text` needs no download at all."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; the corpora are "
                         f"{sorted(CORPORA)} (english_text() needs no "
                         f"download)")
    try:
        import pooch
    except ImportError:
        raise ImportError("downloading a corpus needs pooch: pip install "
                          "pooch") from None
    url, known_hash = CORPORA[name]
    path = cache_dir if cache_dir is not None else pooch.os_cache("tinyformer")
    try:
        local = pooch.retrieve(url, known_hash=known_hash, path=path,
                               fname=f"{name}.txt", progressbar=False)
    except ValueError:
        raise                          # a checksum mismatch: pooch says so
    except Exception as err:           # no network, a proxy, a server error
        raise ConnectionError(f"could not download the corpus {name!r} from "
                              f"{url} ({type(err).__name__}: {err}). Are you "
                              f"offline? english_text() needs no download."
                              ) from err
    with open(local, encoding="utf-8") as f:
        return f.read()


__all__ = ["CONTEXT_TEMPLATES", "CORPORA", "PRONOUN_TEMPLATES", "RELATIONS", "SHARED_CONTEXT",
           "SyntheticCorpus",
           "WORD_PATTERN", "english_split", "english_text", "get_batch",
           "load_corpus", "pack_documents", "synthetic_corpus", "synthetic_entropy", "words"]
