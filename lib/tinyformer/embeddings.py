"""Chapter 1: static word vectors, counted and learned.

A static embedding gives every word one vector, whatever sentence it is in. Two ways to get
such vectors from a corpus, built here from scratch:

* counting: a word-by-context co-occurrence matrix (:func:`cooccurrence`), reweighted by
  positive pointwise mutual information (:func:`ppmi`) and compressed by a truncated SVD
  (:func:`svd_vectors`);
* predicting: skip-gram with negative sampling (:class:`SkipGram`, :func:`train_skipgram`),
  Mikolov et al. (2013), trained with the gradient the chapter derives (:func:`sgns_gradients`).

Then what the vectors are judged by: :func:`cosine_similarity`, nearest neighbours and analogies
(:func:`analogy`, :func:`analogy_accuracy`), and a linear probe (:func:`probe_accuracy`) that
chapter 1 uses on a transformer's contextual vectors.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.validation import check_int

# --------------------------------------------------------------------------- vectors and words

def cosine_similarity(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """cos(u, v) = u·v / (|u| |v|) over the last dimension (the others
    broadcast): the angle between two vectors, blind to their lengths.
    A zero vector has no direction: an error."""
    for name, x in (("u", u), ("v", v)):
        _check_vectors(name, x)
    if u.shape[-1] != v.shape[-1]:
        raise ValueError(f"u and v must have the same last dimension, "
                         f"got {u.shape[-1]} and {v.shape[-1]}")
    return (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))


def _check_vectors(name: str, x) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a floating-point torch.Tensor, got {kind}")
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (a vector), got a scalar")
    if bool((x.norm(dim=-1) == 0).any()):
        raise ValueError(f"{name} contains a zero vector: its cosine similarity is undefined")


class Vocab:
    """Words and their ids, most frequent first (ties in alphabetical order, so the ids are the
    same on every machine). ``min_count`` drops rarer words."""

    def __init__(self, tokens, min_count: int = 1):
        min_count = check_int("min_count", min_count)
        tokens = _check_tokens(tokens)
        self.counts = Counter(tokens)
        kept = sorted((w for w, n in self.counts.items() if n >= min_count),
                      key=lambda w: (-self.counts[w], w))
        if not kept:
            raise ValueError(f"no word occurs at least min_count={min_count} times")
        self.words = kept
        self.index = {w: i for i, w in enumerate(kept)}

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word) -> bool:
        return word in self.index

    def ids(self, tokens) -> torch.Tensor:
        """The ids of ``tokens``, ``(n,)`` int64, words outside the vocabulary left out (as word2vec
        does)."""
        return torch.tensor([self.index[w] for w in tokens if w in self.index], dtype=torch.long)

    def frequencies(self) -> torch.Tensor:
        """Each word's count, in id order, as a float64 tensor ``(V,)``."""
        return torch.tensor([self.counts[w] for w in self.words], dtype=torch.float64)


@dataclass
class WordVectors:
    """One vector per word: ``vectors[i]`` belongs to ``words[i]``; ``vectors`` is
    ``(len(words), d)``."""

    words: list
    vectors: torch.Tensor

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}

    def __getitem__(self, word: str) -> torch.Tensor:
        return self.vectors[self._id(word)]

    def _id(self, word: str, name: str = "word") -> int:
        if word not in self.index:
            raise KeyError(f"{name} {word!r} is not in the vocabulary ({len(self.words)} words)")
        return self.index[word]

    def most_similar(self, word, topn: int = 5, exclude=()) -> list[tuple[str, float]]:
        """The ``topn`` words of highest cosine similarity to ``word`` (a word or a vector),
        leaving out ``word`` itself and the words in ``exclude``."""
        topn = check_int("topn", topn)
        if isinstance(word, str):
            query, exclude = self[word], set(exclude) | {word}
        else:
            query, exclude = word, set(exclude)
        sims = cosine_similarity(self.vectors, query.to(self.vectors.dtype))
        for w in exclude:
            if w in self.index:
                sims[self.index[w]] = -math.inf
        best = torch.topk(sims, min(topn, len(self.words))).indices
        return [(self.words[i], float(sims[i])) for i in best if sims[i] > -math.inf]


# --------------------------------------------------------------------------- counting

def _check_tokens(tokens) -> list:
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of words, got a str (split it first, for "
                        "example with tinyformer.data.words)")
    tokens = list(tokens)
    if not tokens:
        raise ValueError("tokens is empty: the corpus needs at least one word")
    return tokens


def cooccurrence(tokens, vocab: Vocab, window: int = 2) -> torch.Tensor:
    """``C[w, c]``: how often word ``c`` appears within ``window`` positions of word ``w``
    (either side, the word itself not counted), words outside ``vocab`` skipped. Shape (V, V),
    symmetric, float64."""
    tokens = _check_tokens(tokens)
    window = check_int("window", window)
    ids = torch.tensor([vocab.index.get(w, -1) for w in tokens])
    V = len(vocab)
    C = torch.zeros(V * V, dtype=torch.float64)
    for offset in range(1, window + 1):
        a, b = ids[:-offset], ids[offset:]
        keep = (a >= 0) & (b >= 0)
        pair = a[keep] * V + b[keep]
        counts = torch.bincount(pair, minlength=V * V).double()
        C += counts + counts.view(V, V).T.reshape(-1)     # both directions
    return C.view(V, V)


def pmi(C: torch.Tensor, context_power: float = 1.0) -> torch.Tensor:
    """Pointwise mutual information log P(w, c) / (P(w) P(c)) of a count matrix ``(V, V')``, the
    same shape, float64; cells never seen are -inf. ``context_power`` raises the context counts to
    that power before normalising (0.75 is the distribution word2vec draws its negatives from)."""
    if not isinstance(C, torch.Tensor) or C.dim() != 2:
        raise ValueError(f"C must be a 2-D tensor of counts, got {type(C).__name__}")
    C = C.double()
    total = C.sum()
    if total <= 0:
        raise ValueError("C has no counts: the corpus is too short for this window")
    p_wc = C / total
    p_w = C.sum(1, keepdim=True) / total
    ctx = C.sum(0, keepdim=True) ** context_power
    p_c = ctx / ctx.sum()
    with torch.no_grad():   # a pair never seen is -inf, even in a row or column of zeros
        return torch.where(C > 0, torch.log(p_wc) - torch.log(p_w) - torch.log(p_c), -math.inf)


def ppmi(C: torch.Tensor) -> torch.Tensor:
    """Positive PMI: max(PMI, 0), so pairs never seen (or seen less than chance) count 0.
    ``(V, V')`` counts -> ``(V, V')``, float64."""
    return pmi(C).clamp(min=0)


def svd_vectors(M: torch.Tensor, dim: int) -> torch.Tensor:
    """The rows of the best rank-``dim`` approximation of ``M`` ``(V, V')``, as ``dim``-wide
    vectors ``(V, dim)``: U_dim · sqrt(S_dim) (the square root shares the singular values between
    words and contexts, as Levy et al., 2015, recommend). The sign of each direction is fixed so
    that its largest entry is positive, which makes the result the same on every machine."""
    dim = check_int("dim", dim)
    if dim > min(M.shape):
        raise ValueError(f"dim must be at most {min(M.shape)} for a matrix of shape "
                         f"{tuple(M.shape)}, got {dim}")
    U, S, _ = torch.linalg.svd(M.double(), full_matrices=False)
    U = U[:, :dim]
    sign = torch.sign(U.gather(0, U.abs().argmax(0, keepdim=True)))
    return U * sign * S[:dim].sqrt()


# --------------------------------------------------------------------------- predicting

class SkipGram(nn.Module):
    """Skip-gram with negative sampling: every word has two vectors, ``W_in[w]`` (v, used when w
    is the centre word: the embedding we keep) and ``W_out[w]`` (u, used when w is a context).
    The model scores a (centre, context) pair by σ(u_o · v_c)."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        vocab_size = check_int("vocab_size", vocab_size)
        dim = check_int("dim", dim)
        # word2vec's start: small random centre vectors, zero context vectors
        self.W_in = nn.Parameter((torch.rand(vocab_size, dim) - 0.5) / dim)
        self.W_out = nn.Parameter(torch.zeros(vocab_size, dim))

    def forward(self, centre, context, negatives) -> torch.Tensor:
        """The mean over pairs of -log σ(u_o·v_c) - Σ_j log σ(-u_j·v_c). ``centre`` and
        ``context``: (B,) ids; ``negatives``: (B, k) ids."""
        v_c = self.W_in[centre]                                    # (B, d)
        u_o = self.W_out[context]                                  # (B, d)
        u_neg = self.W_out[negatives]                              # (B, k, d)
        pos = F.logsigmoid((u_o * v_c).sum(-1))                    # (B,)
        neg = F.logsigmoid(-(u_neg @ v_c.unsqueeze(-1)).squeeze(-1)).sum(-1)   # (B,)
        return -(pos + neg).mean()


def sgns_gradients(v_c, u_o, u_neg):
    """The gradients of one pair's loss -log σ(u_o·v_c) - Σ_j log σ(-u_j·v_c), by hand, for a
    batch of pairs: v_c, u_o (B, d), u_neg (B, k, d). Returns (g_c, g_o, g_neg) with the shapes
    of (v_c, u_o, u_neg)."""
    s_pos = torch.sigmoid((u_o * v_c).sum(-1, keepdim=True))              # (B, 1)
    s_neg = torch.sigmoid((u_neg * v_c.unsqueeze(1)).sum(-1, keepdim=True))  # (B, k, 1)
    g_c = (s_pos - 1) * u_o + (s_neg * u_neg).sum(1)                         # (B, d)
    g_o = (s_pos - 1) * v_c                                                  # (B, d)
    g_neg = s_neg * v_c.unsqueeze(1)                                         # (B, k, d)
    return g_c, g_o, g_neg


def skipgram_pairs(ids: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (centre, context) pair of a stream of ids ``(n,)`` with the context at most ``window``
    positions away on either side; the centre is never its own context. Returns
    ``(centres, contexts)``, two ``(n_pairs,)`` tensors of ids."""
    window = check_int("window", window)
    centres, contexts = [], []
    for offset in range(1, window + 1):
        centres += [ids[:-offset], ids[offset:]]
        contexts += [ids[offset:], ids[:-offset]]
    return torch.cat(centres), torch.cat(contexts)


def noise_distribution(counts: torch.Tensor, power: float = 0.75) -> torch.Tensor:
    """The distribution negatives are drawn from: unigram counts ``(V,)`` raised to ``power``,
    normalised, ``(V,)`` (word2vec's 0.75 gives rare words more turns than their share)."""
    p = counts.double() ** power
    return p / p.sum()


def _sgns_step(v_c, U, rate):
    """-rate times :func:`sgns_gradients`, with the context and its negatives stacked in
    U (B, 1 + k, d), the context first: fewer operations, the same numbers."""
    coef = torch.sigmoid((U * v_c.unsqueeze(1)).sum(-1, keepdim=True))      # (B, 1 + k, 1)
    coef[:, 0] -= 1                                                          # σ - 1 for the context
    coef *= -rate
    return (coef * U).sum(1), coef * v_c.unsqueeze(1)                        # (B, d), (B, 1 + k, d)


def train_skipgram(tokens, dim: int = 50, window: int = 5, negatives: int = 5,
                   epochs: int = 5, lr: float = 0.025, batch_size: int = 256,
                   min_count: int = 1, seed: int = 0, progress: bool = True):
    """Train :class:`SkipGram` on a list of words with word2vec's recipe: every pair within
    ``window``, ``negatives`` noise words per pair from the unigram^0.75 distribution, plain SGD
    whose rate falls linearly from ``lr`` to nearly 0, the gradient of
    :func:`sgns_gradients` summed over a batch of ``batch_size`` pairs. Returns
    ``(WordVectors, model, vocab)``: the vectors are the centre vectors ``W_in``."""
    from tqdm.auto import tqdm

    tokens = _check_tokens(tokens)
    dim, window = check_int("dim", dim), check_int("window", window)
    negatives, epochs = check_int("negatives", negatives), check_int("epochs", epochs)
    batch_size = check_int("batch_size", batch_size)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    vocab = Vocab(tokens, min_count)
    ids = vocab.ids(tokens)
    if len(ids) <= window:
        raise ValueError(f"tokens has {len(ids)} words in the vocabulary: too few for "
                         f"window={window}")
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):   # seed the start without touching the caller's stream
        torch.manual_seed(seed)
        model = SkipGram(len(vocab), dim)
    W_in, W_out = model.W_in.data, model.W_out.data
    centres, contexts = skipgram_pairs(ids, window)
    # word2vec's trick for fast sampling: a long table holding each word in proportion to its
    # noise probability, read at uniformly random places
    table = torch.multinomial(noise_distribution(vocab.frequencies()).float(), 1 << 20,
                              replacement=True, generator=gen)
    n_pairs = len(centres)
    total = epochs * math.ceil(n_pairs / batch_size)
    bar = tqdm(total=total, desc="skip-gram", disable=not progress, mininterval=1)
    step, chunk = 0, 64 * batch_size
    for epoch in range(epochs):
        order = torch.randperm(n_pairs, generator=gen)
        for first in range(0, n_pairs, chunk):          # draw a chunk's pairs and noise at once
            idx = order[first:first + chunk]
            neg = table[torch.randint(len(table), (len(idx), negatives), generator=gen)]
            c_all = centres[idx]                                          # (chunk,)
            outs_all = torch.cat([contexts[idx, None], neg], 1)           # (chunk, 1 + k)
            for start in range(0, len(idx), batch_size):
                c = c_all[start:start + batch_size]                       # (B,)
                outs = outs_all[start:start + batch_size]                 # (B, 1 + k)
                rate = lr * max(1e-4, 1 - step / total)
                g_c, g_out = _sgns_step(W_in[c], W_out[outs], rate)
                # each pair's step added into the rows it belongs to (scatter_add_ is several
                # times faster than index_add_ on the CPU)
                W_in.scatter_add_(0, c[:, None].expand(-1, dim), g_c)
                W_out.scatter_add_(0, outs.reshape(-1, 1).expand(-1, dim),
                                   g_out.reshape(-1, dim))
                step += 1
                bar.update()
        # a batch's steps are summed, not averaged, so a frequent word takes many at once: too
        # large a batch (or rate) overshoots and the vectors blow up. Say so rather than return NaN.
        if not (torch.isfinite(W_in).all() and torch.isfinite(W_out).all()):
            bar.close()
            raise FloatingPointError(
                f"skip-gram diverged in epoch {epoch + 1}: the vectors are no longer finite. Each "
                f"batch's gradients are summed into the rows they belong to, so a frequent word "
                f"takes many steps at once; lower batch_size (now {batch_size}) or lr (now {lr}).")
    bar.close()
    return WordVectors(list(vocab.words), W_in.clone()), model, vocab


# --------------------------------------------------------------------------- judging vectors

def analogy(wv: WordVectors, a: str, b: str, c: str,
            exclude: bool = True) -> str:
    """a is to b as c is to ?: the word whose vector has the highest cosine
    similarity with b - a + c (3CosAdd, Mikolov et al., 2013), from
    unit-length vectors. ``exclude`` leaves the three question words out of
    the answers, as published scores do: without it the answer is often b
    or c itself."""
    for name, w in (("a", a), ("b", b), ("c", c)):
        wv._id(w, name)
    unit = wv.vectors / wv.vectors.norm(dim=-1, keepdim=True)
    target = unit[wv.index[b]] - unit[wv.index[a]] + unit[wv.index[c]]
    banned = (a, b, c) if exclude else ()
    return wv.most_similar(target, 1, exclude=banned)[0][0]


def analogy_questions(pairs) -> list[tuple[str, str, str, str]]:
    """Every question a:b :: c:d from a list of pairs (a, b), (c, d) with a != c."""
    pairs = sorted(set(pairs))
    return [(a, b, c, d) for a, b in pairs for c, d in pairs if a != c]


def analogy_accuracy(wv: WordVectors, pairs, method: str = "3cosadd") -> float:
    """The share of :func:`analogy_questions` answered right. ``method="nearest"`` is the
    baseline that ignores a and b: the nearest neighbour of c (question words excluded)."""
    if method not in ("3cosadd", "nearest"):
        raise ValueError(f"method must be '3cosadd' or 'nearest', got {method!r}")
    questions = analogy_questions(pairs)
    if not questions:
        raise ValueError("pairs must hold at least two different pairs")
    unit = wv.vectors / wv.vectors.norm(dim=-1, keepdim=True)
    a, b, c, d = (torch.tensor([wv._id(q[i]) for q in questions]) for i in range(4))
    target = unit[c] if method == "nearest" else unit[b] - unit[a] + unit[c]
    sims = target @ unit.T                                             # (Q, V)
    rows = torch.arange(len(questions))
    for col in (a, b, c):
        sims[rows, col] = -math.inf
    return float((sims.argmax(1) == d).double().mean())


def offset_consistency(wv: WordVectors, pairs) -> float:
    """The mean cosine similarity between the offsets b - a of every two different pairs (unit
    vectors first): near 1 when one direction carries every pair, as 3CosAdd needs."""
    pairs = sorted(set(pairs))
    if len(pairs) < 2:
        raise ValueError("pairs must hold at least two different pairs")
    unit = wv.vectors / wv.vectors.norm(dim=-1, keepdim=True)
    offsets = torch.stack([unit[wv._id(b)] - unit[wv._id(a)] for a, b in pairs])
    offsets = offsets / offsets.norm(dim=-1, keepdim=True)
    sims = offsets @ offsets.T
    n = len(pairs)
    return float((sims.sum() - sims.diagonal().sum()) / (n * (n - 1)))


def probe_accuracy(X_train, y_train, X_test, y_test, steps: int = 300,
                   weight_decay: float = 1e-3, seed: int = 0) -> float:
    """Train a linear classifier (logistic regression, full-batch Adam) on features ``X_train``
    (N, d) and labels ``y_train`` (N,), standardised with the training set's statistics; return
    its accuracy on ``(X_test, y_test)``. A probe this simple only finds what is linearly
    readable from the features."""
    for name, X in (("X_train", X_train), ("X_test", X_test)):
        if not isinstance(X, torch.Tensor) or X.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor (N, d), got "
                             f"{getattr(X, 'shape', type(X).__name__)}")
    if len(X_train) != len(y_train) or len(X_test) != len(y_test):
        raise ValueError("each X must have one row per label in its y")
    y_train, y_test = torch.as_tensor(y_train).long(), torch.as_tensor(y_test).long()
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    X_train, X_test = X_train.float(), X_test.float()
    mean, std = X_train.mean(0), X_train.std(0) + 1e-6
    Xtr, Xte = (X_train - mean) / std, (X_test - mean) / std
    g = torch.Generator().manual_seed(seed)
    W = (torch.randn(Xtr.shape[1], n_classes, generator=g) * 0.01).requires_grad_()
    bias = torch.zeros(n_classes, requires_grad=True)
    opt = torch.optim.Adam([W, bias], lr=0.05)
    for _ in range(check_int("steps", steps)):
        opt.zero_grad()
        loss = F.cross_entropy(Xtr @ W + bias, y_train) + weight_decay * (W ** 2).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(((Xte @ W + bias).argmax(1) == y_test).float().mean())


__all__ = ["SkipGram", "Vocab", "WordVectors", "analogy", "analogy_accuracy",
           "analogy_questions", "cooccurrence", "cosine_similarity", "noise_distribution",
           "offset_consistency", "pmi", "ppmi", "probe_accuracy", "sgns_gradients",
           "skipgram_pairs", "svd_vectors", "train_skipgram"]
