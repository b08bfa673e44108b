"""Chapter 10 (interpretability): the task that grows induction heads, and what the chapter
measures on the models that learn it.

:func:`span_batch` draws the task: a random span of ``L`` tokens (``L`` from 4 to 12) said again
and again to fill the window, so that after the first ``L`` tokens every next token can be read off
the earlier copy. :func:`attention_only` builds the chapter's small GPT without feed-forward
networks, and :func:`train_induction` trains it while recording, every few steps, what its heads
attend to on a fixed probe (:func:`probe_scores`). :func:`loss_by_position`,
:func:`ablation_losses` and :func:`path_removed` are the measurements the chapter reads.

The running example (chapter 1's pronoun sentences): :func:`antecedent_attention` measures where
each head looks from the position before the referent, :func:`referent_scores` splits the
referent's loss into its kind and its name (:func:`kind_mask`), :func:`flip_adjective` and
:func:`patch_heads` test which heads carry the decision by activation patching.

Exercise 10.2's circuit: :func:`circuit_layout`, :func:`blank_circuit` and :func:`build_circuit`
lay out and load a hand-wired two-layer model, and :func:`distinct_spans` draws its test sequences
(here, not in the course package, so that a learner's answer may call them).
"""

from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from tinyformer import interp
from tinyformer.data import PRONOUN_TEMPLATES
from tinyformer.model import GPT, GPTConfig
from tinyformer.validation import check_int

#: The task: 16 token ids, windows of 32 tokens, spans of 4 to 12 tokens.
VOCAB, BLOCK, SPAN = 16, 32, (4, 12)
#: The model: width 64, four heads of 16 dimensions, no feed-forward network.
D_MODEL, N_HEAD = 64, 4
#: The probe every score is measured on: spans of 8 tokens said twice.
PROBE_PERIOD, PROBE_BATCH, PROBE_SEED = 8, 64, 1234


class NoFeedForward(nn.Module):
    """Stands in for a block's feed-forward network and adds nothing, so
    that every change to the residual stream comes from a head."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def attention_only(n_layer: int, seed: int = 0, vocab_size: int = VOCAB) -> GPT:
    """A GPT of ``n_layer`` blocks whose feed-forward networks add zero:
    attention heads, layer norms, embeddings and the (tied) LM head."""
    torch.manual_seed(check_int("seed", seed, minimum=None))
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=BLOCK, n_layer=n_layer,
                          n_head=N_HEAD, d_model=D_MODEL))
    for block in model.blocks.blocks:
        block.ffn = NoFeedForward()           # ln_2 stays, and reads nothing
    return model


def span_batch(gen: torch.Generator, batch_size: int,
               vocab_size: int = VOCAB, T: int = BLOCK, span=SPAN):
    """``batch_size`` windows of ``T`` tokens, each a random span of ``L``
    tokens (drawn from ``span``, inclusive) repeated. Returns ``(x, y, L)``:
    inputs ``(B, T)``, next-token targets ``(B, T)`` with -100 where the
    next token is still in the first span (nothing predicts it), and ``L``."""
    lo, hi = span
    L = torch.randint(lo, hi + 1, (batch_size,), generator=gen)   # (B,)
    tokens = torch.randint(0, vocab_size, (batch_size, hi), generator=gen)
    t = torch.arange(T + 1)
    seq = torch.gather(tokens, 1, t % L[:, None])        # (B, T + 1): repeats
    x, y = seq[:, :-1], seq[:, 1:].clone()
    y[t[:-1] < L[:, None] - 1] = -100                    # in the first span
    return x, y, L


def probe() -> torch.Tensor:
    """The fixed probe: :data:`PROBE_BATCH` spans of :data:`PROBE_PERIOD`
    random tokens, each said twice, ``(PROBE_BATCH, 2 * PROBE_PERIOD)``."""
    gen = torch.Generator().manual_seed(PROBE_SEED)
    return interp.repeated_tokens(VOCAB, PROBE_PERIOD, batch=PROBE_BATCH, generator=gen)


def loss_by_position(model, idx: torch.Tensor) -> torch.Tensor:
    """The next-token loss at each position of ``idx`` ``(B, T)``, averaged
    over the batch: ``(T - 1,)`` in nats."""
    with torch.no_grad():
        logits = model(idx)[:, :-1]                                  # (B, T - 1, V)
        loss = F.cross_entropy(logits.transpose(1, 2), idx[:, 1:], reduction="none")
    return loss.mean(dim=0)


def probe_scores(model, idx: torch.Tensor, period: int) -> dict:
    """What every head does on ``idx`` (which repeats with ``period``):
    ``previous``, ``induction`` and ``itself`` (the mean weight on its own
    position) ``(n_layer, n_heads)``; and the loss on the ``first`` and
    the ``second`` copy (nats per predicted token)."""
    patterns = interp.attention_patterns(model, idx)                 # (n_layer, B, H, T, T)
    loss = loss_by_position(model, idx)                              # position t predicts t + 1
    return dict(previous=interp.previous_token_score(patterns),
                induction=interp.induction_score(patterns, period),
                itself=patterns.diagonal(dim1=-2, dim2=-1).mean(dim=(1, 3)),
                first=float(loss[:period - 1].mean()), second=float(loss[period - 1:].mean()))


def induction_over_periods(model, periods=(5, 8, 11), batch: int = PROBE_BATCH) -> torch.Tensor:
    """Each head's induction score on probes of several periods (spans of
    each length said twice), the lowest over ``periods``: ``(n_layer,
    n_heads)``. A head that looks a fixed distance back scores high at one
    period only; an induction head scores high at all of them."""
    scores = []
    for period in periods:
        gen = torch.Generator().manual_seed(PROBE_SEED + period)
        idx = interp.repeated_tokens(VOCAB, period, batch=batch, generator=gen)
        scores.append(interp.induction_score(interp.attention_patterns(model, idx), period))
    return torch.stack(scores).min(dim=0).values


def train_induction(n_layer: int, steps: int = 1000, seed: int = 0, lr: float = 1e-3,
                    batch_size: int = 32, every: int = 10, progress: bool = True):
    """Train :func:`attention_only` on :func:`span_batch` with Adam, one
    fresh batch per step from a generator seeded with ``seed``. Every
    ``every`` steps (and at the end) the heads are scored on :func:`probe`.
    Returns ``(model, history)``: ``history`` holds ``loss`` (every step)
    and ``step``, ``previous``, ``induction`` ``(n_points, n_layer,
    n_heads)`` and ``second`` (the loss on the probe's second copy) at the
    scored steps."""
    steps, every = check_int("steps", steps), check_int("every", every)
    model = attention_only(n_layer, seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    idx = probe()
    history = dict(loss=[], step=[], previous=[], induction=[], second=[])

    def score(step):
        model.eval()
        s = probe_scores(model, idx, PROBE_PERIOD)
        model.train()
        history["step"].append(step)
        for k in ("previous", "induction", "second"):
            history[k].append(s[k])
    if progress:
        from tqdm.auto import trange  # imported only when asked (tqdm.auto warns otherwise)
    else:
        trange = range
    for step in trange(steps):
        if step % every == 0:
            score(step)
        x, y, _ = span_batch(gen, batch_size)
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history["loss"].append(loss.item())
    score(steps)
    model.eval()
    for k in ("previous", "induction"):
        history[k] = torch.stack(history[k])
    return model, history


def bag_of_context_loss(x: torch.Tensor, y: torch.Tensor) -> float:
    """The loss of a predictor that knows no order: the next token is drawn
    from the tokens seen so far, in proportion to how often each was seen.
    ``x``, ``y`` from :func:`span_batch`; nats per predicted token."""
    B, T = x.shape
    counts = F.one_hot(x, VOCAB).cumsum(dim=1).float()                # (B, T, V) seen up to t
    p = counts / counts.sum(dim=-1, keepdim=True)
    keep = y != -100
    picked = p[keep].gather(1, y[keep][:, None]).squeeze(1)
    return float(-picked.log().mean())


def task_loss(model, x: torch.Tensor, y: torch.Tensor) -> float:
    """The model's loss on a fixed batch of the task, without gradients."""
    with torch.no_grad():
        return float(model.loss(x, y))


def ablation_losses(model, x, y, groups: dict, means=None) -> dict:
    """The task loss with each group of heads switched off: ``groups`` maps
    a label to a list of ``(layer, head)``; zero ablation, or mean ablation
    with ``means`` from :func:`tinyformer.interp.head_means`."""
    out = {}
    for label, heads in groups.items():
        with interp.ablate_heads(model, heads, means=means):
            out[label] = task_loss(model, x, y)
    return out


PATHS = ("queries", "keys", "values", "direct")


def path_removed(model, idx: torch.Tensor, heads, path: str):
    """Run ``model`` on ``idx`` with the layer-0 ``heads`` switched off for
    one reader only: block 1's ``"queries"``, ``"keys"`` or ``"values"``
    (computed from the stream without those heads), or the ``"direct"``
    path (their output is taken out of the stream the LM head reads, and
    nowhere else). Returns ``(logits, patterns)``."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    heads = [(0, h) for h in heads]
    n_layer = len(model.blocks.blocks)
    if path == "direct":
        _, clean = interp.run_with_cache(model, idx,
                                         ["blocks.0.attn.hook_z"])
        z = clean["blocks.0.attn.hook_z"].clone()      # (B, T, H, d_head)
        keep = [h for h in range(z.shape[2]) if (0, h) not in heads]
        z[:, :, keep] = 0.0                            # the removed heads only
        W_O = model.blocks.blocks[0].attn.o_proj.weight
        written = z.flatten(-2) @ W_O.T                # (B, T, d_model)
        point = f"blocks.{n_layer - 1}.hook_resid_post"

        def fn(act, name):
            return act - written
    else:
        point = f"blocks.1.attn.hook_{path[0]}"        # hook_q, hook_k, hook_v
        with interp.ablate_heads(model, heads):        # stream without them
            _, ablated = interp.run_with_cache(model, idx, [point])

        def fn(act, name):                             # ... read by one input
            return ablated[name]
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_layer)]
    with torch.no_grad(), interp.hooks(model, {point: fn}):
        logits, cache = interp.run_with_cache(model, idx, names)
    return logits, torch.stack([cache[n] for n in names])


# --------------------------------------------------------------------------- the running example
# Chapter 1's pronoun sentences ("the chicken did not cross the road because it was too tired .
# it means the chicken ."), laid out by tinyformer.experiments.ch01.pronoun_batch: at "the" the
# next word is the antecedent, and the grammar knows which noun that is.


def noun_positions(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions of the antecedent and of the other noun, each (N,)."""
    first = torch.ones_like(batch["it"])                  # "the <first> did not ..."
    second = batch["it"] - 2                               # "... the <second> because it"
    ante = torch.where(batch["label"] == 0, first, second)
    other = torch.where(batch["label"] == 0, second, first)
    return ante, other


@torch.no_grad()
def attention_from(model, batch: dict, query: str = "the") -> torch.Tensor:
    """Every head's attention weights from the position ``batch[query]`` of each sentence:
    (N, n_layer, n_heads, T), each row a distribution over the keys 0..query."""
    model.eval()
    patterns = interp.attention_patterns(model, batch["ids"])   # (L, N, H, T, T)
    rows = torch.arange(len(batch["ids"]))
    return patterns.permute(1, 3, 0, 2, 4)[rows, batch[query]]  # (N, L, H, T)


def antecedent_attention(model, batch: dict, query: str = "the") -> dict:
    """Per head, (n_layer, n_heads) each: ``accuracy``, the fraction of sentences in which the
    head puts more weight on the antecedent than on the other noun; ``antecedent``, ``other``,
    ``adjective``, ``verb``: its mean weight on those positions. Read the accuracy beside the
    weights: a head that gives both nouns almost nothing (0.00 vs 0.01) can still score 0.3 or
    0.7 from a slight preference for one position or layout, which resolves nothing."""
    w = attention_from(model, batch, query)               # (N, L, H, T)
    ante, other = noun_positions(batch)

    def at(pos):                                           # (N,) positions -> (N, L, H)
        return w.gather(-1, pos.view(-1, 1, 1, 1).expand(*w.shape[:-1], 1)).squeeze(-1)
    w_ante, w_other = at(ante), at(other)
    return {"accuracy": (w_ante > w_other).float().mean(0), "antecedent": w_ante.mean(0),
            "other": w_other.mean(0), "adjective": at(batch["adjective"]).mean(0),
            "verb": at(torch.full_like(ante, 4)).mean(0)}


def kind_mask(batch: dict, vocab: list[str]) -> torch.Tensor:
    """(N, V) True at the nouns of the antecedent's kind: the template's list it was drawn from
    (the 10 animals that do not cross, the 8 roads they do not cross, ...). The other noun is
    always of the other kind, so beating it needs only the kind; naming *this* noun among its
    kind needs the noun itself."""
    index = {w: i for i, w in enumerate(vocab)}
    lists = {t[0].split()[4]: (t[1], t[2]) for t in PRONOUN_TEMPLATES}   # verb -> noun lists
    mask = torch.zeros(len(batch["ids"]), len(vocab), dtype=torch.bool)
    for i, (verb, label) in enumerate(zip(batch["ids"][:, 4].tolist(), batch["label"].tolist())):
        mask[i, [index[w] for w in lists[vocab[verb]][label]]] = True
    return mask


@torch.no_grad()
def referent_scores(model, batch: dict, kind: torch.Tensor | None = None) -> dict:
    """At "the" (next word: the referent), per sentence (N,): ``margin``, log p(antecedent) -
    log p(other noun) (positive: right); ``loss``, -log p(antecedent) in nats. With ``kind``
    (:func:`kind_mask`) it splits the loss in two: ``kind_loss``, -log p(a noun of the
    antecedent's kind), and ``name_loss``, -log p(antecedent | its kind); ``named``, whether
    the antecedent beats every other noun of its kind."""
    model.eval()
    logp = model(batch["ids"]).log_softmax(-1)            # (N, T, V)
    rows = torch.arange(len(batch["ids"]))
    at = logp[rows, batch["the"]]                          # (N, V)
    first, second = at[rows, batch["first"]], at[rows, batch["second"]]
    ante = torch.where(batch["label"] == 0, first, second)
    other = torch.where(batch["label"] == 0, second, first)
    out = {"margin": ante - other, "loss": -ante}
    if kind is not None:
        in_kind = at.masked_fill(~kind, float("-inf"))     # (N, V), only the kind's nouns
        out["kind_loss"] = -in_kind.logsumexp(-1)
        out["name_loss"] = out["loss"] - out["kind_loss"]
        out["named"] = in_kind.max(-1).values == ante
    return out


def summary(scores: dict) -> dict:
    """Means of :func:`referent_scores`: ``accuracy`` (margin > 0), ``margin``, ``loss``, and
    with a kind, ``kind_loss``, ``name_loss`` and ``named`` (the share of sentences)."""
    out = {"accuracy": float((scores["margin"] > 0).float().mean())}
    out.update({k: float(v.float().mean()) for k, v in scores.items()})
    return out


def flip_adjective(batch: dict, vocab: list[str], seed: int = 0) -> dict:
    """The same sentences with the adjective swapped for one that fits the *other* noun (drawn
    from the same template's list), so the antecedent flips and nothing else changes before
    "the". Positions after the adjective are unchanged; ``label`` is flipped."""
    rng, ids = random.Random(seed), batch["ids"].clone()
    by_verb = {t[0].split()[4]: t[3:] for t in PRONOUN_TEMPLATES}   # cross/fit/lift -> lists
    for i in range(len(ids)):
        fits_a, fits_b = by_verb[vocab[ids[i, 4]]]       # disjoint within a template
        adj = vocab[ids[i, batch["adjective"][i]]]
        ids[i, batch["adjective"][i]] = vocab.index(rng.choice(fits_b if adj in fits_a else fits_a))
    return {**batch, "ids": ids, "label": 1 - batch["label"]}


@torch.no_grad()
def patch_heads(model, clean: dict, flipped: dict, hook: str = "attn.hook_z",
                where: str | None = "the") -> torch.Tensor:
    """Activation patching, one head at a time: run the clean sentences with that head's slice
    of ``blocks.{l}.<hook>`` (``attn.hook_z``: its output; ``attn.hook_v``: the values it reads)
    taken from the flipped ones at the position ``clean[where]`` (every position if None).
    Returns (n_layer, n_heads): the share of the clean -> flipped fall of the margin that the
    patch reproduces (0: the head carries none of the decision, 1: it alone flips the answer).
    Patching ``hook_v`` at ``where="adjective"`` asks whether a head's share comes from what it
    reads at the adjective itself."""
    model.eval()
    L, H = model.config.n_layer, model.config.n_head
    names = [f"blocks.{l}.{hook}" for l in range(L)]
    _, cache = interp.run_with_cache(model, flipped["ids"], names)   # each (N, T, H, d_head)
    base = referent_scores(model, clean)["margin"].mean()
    # on the flipped sentences, log p(clean antecedent) - log p(clean other) is -their margin
    gone = -referent_scores(model, flipped)["margin"].mean()
    # which (sentence, position) pairs to patch: one position per sentence, or all of them
    rows, pos = ((slice(None), slice(None)) if where is None
                 else (torch.arange(len(clean["ids"])), clean[where]))
    effect = torch.zeros(L, H)
    for l in range(L):
        for h in range(H):
            def put(x, name, l=l, h=h):                   # x: (N, T, H, d_head)
                x = x.clone()
                x[rows, pos, h] = cache[names[l]][rows, pos, h]
                return x
            with interp.hooks(model, {names[l]: put}):
                effect[l, h] = (base - referent_scores(model, clean)["margin"].mean()) / (base - gone)
    return effect


# --------------------------------------------------------------------------- the circuit of Exercise 10.2
# The helpers Exercise 10.2 tells the reader to use (tinyformer.course.ch10 imports them from here, and
# the chapter imports them from there). They live outside tinyformer.course, whose code a grader refuses
# to see called by an answer, so that an answer may call them freely (a self-test, a search over scales).

from types import SimpleNamespace  # noqa: E402 - this section is appended to the chapter's experiments

#: The six matrices an answer to Exercise 10.2 returns, in this order.
CIRCUIT_MATRICES = ("W_Q0", "W_K0", "W_V0", "W_O0", "W_Q1", "W_K1")


def circuit_layout(V: int, T: int) -> SimpleNamespace:
    """Where things live in the residual stream of :func:`blank_circuit`, for a vocabulary of ``V``
    tokens and ``T`` positions: ``d_model = 2V + T + 2`` dimensions, in four blocks (slices)::

        TOK   the current token's one-hot              (V dims)   written by the token embedding
        PREV  the previous token's one-hot             (V dims)   empty: head 0.0 is to write it
        POS   the position's one-hot                   (T dims)   written by the position embedding
        MEAN  two dims that keep the mean at zero      (2 dims)   the first holds -2 (token + position)

    A plain namespace (``layout.TOK``, ``layout.d_model``, …): reading it runs no code at all."""
    return SimpleNamespace(V=V, T=T, d_model=2 * V + T + 2, TOK=slice(0, V), PREV=slice(V, 2 * V),
                           POS=slice(2 * V, 2 * V + T), MEAN=slice(2 * V + T, 2 * V + T + 2))


def blank_circuit(V: int, T: int, dtype: torch.dtype = torch.float32) -> tuple[GPT, SimpleNamespace]:
    """A two-layer GPT (``tinyformer.model.GPT``, one head per layer, ``d_head = d_model``) for a
    vocabulary of ``V`` tokens and ``T`` positions, and its layout (:func:`circuit_layout`). The
    embeddings write the layout (token one-hot, position one-hot, -2 in the first ``MEAN`` dimension);
    the layer norms are plain (gain 1, bias 0); every other weight and bias is zero: the attention, the
    feed-forward networks (which so add nothing) and, through ``ln_f``, the logits. The global random
    generator is left as it was."""
    layout = circuit_layout(V, T)
    with torch.random.fork_rng(devices=[]):
        model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=1, d_model=layout.d_model))
    model = model.to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in model.blocks.blocks:
            block.ln_1.weight.fill_(1.0)
            block.ln_2.weight.fill_(1.0)
        model.token_embedding.weight[:, layout.TOK] = torch.eye(V, dtype=dtype)
        model.token_embedding.weight[:, layout.MEAN.start] = -2.0
        model.position_embedding.weight[:, layout.POS] = torch.eye(T, dtype=dtype)
    return model, layout


def build_circuit(layout: SimpleNamespace, weights, dtype: torch.dtype = torch.float32) -> GPT:
    """:func:`blank_circuit` with the six matrices ``weights = (W_Q0, W_K0, W_V0, W_O0, W_Q1, W_K1)``,
    each ``(d_model, d_model)`` in the row convention (``q = x̂ @ W_Q``), set as the q, k, v and o
    projections of layer 0 and the q and k projections of layer 1 (an ``nn.Linear`` stores the
    transpose)."""
    model, _ = blank_circuit(layout.V, layout.T, dtype)
    weights = tuple(weights)
    d = layout.d_model
    if len(weights) != len(CIRCUIT_MATRICES):
        raise ValueError(f"weights must be the {len(CIRCUIT_MATRICES)} matrices {CIRCUIT_MATRICES}, "
                         f"got {len(weights)} items")
    for name, w in zip(CIRCUIT_MATRICES, weights):
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != (d, d):
            got = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"{name} must be a ({d}, {d}) tensor, got {got}")
    a0, a1 = (block.attn for block in model.blocks.blocks)
    with torch.no_grad():
        for linear, w in zip((a0.q_proj, a0.k_proj, a0.v_proj, a0.o_proj, a1.q_proj, a1.k_proj), weights):
            linear.weight.copy_(w.detach().T.to(dtype))
    return model


def distinct_spans(V: int, period: int, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``batch`` sequences of ``period`` distinct random tokens (of ``V``), each said twice: ``(batch,
    2 * period)``. No token repeats inside a span, so the only earlier copy of a token is one period
    back."""
    spans = torch.stack([torch.randperm(V, generator=generator)[:period] for _ in range(batch)])
    return spans.repeat(1, 2)
