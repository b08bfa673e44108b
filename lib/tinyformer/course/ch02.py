"""Chapter 2 (attention): the exercises, their test inputs, references, known mistakes and hints.

Exercises 2.1-2.6 are the chapter's (2.7 is an experiment without a check). The drills
``stable_softmax``, ``causal_mask`` and ``attention_head`` keep their public checks but are no
exercise of the chapter notebook, so the grader does not expect them.

Every wrong attention variant comes from one builder, :func:`buggy_attention`, with the mistake
named by a keyword (``scale="none"``, ``split="interleaved"``, ``transpose_W=True``, …), so the
split → scores → mask → softmax → merge → project sequence is written once.
"""

from __future__ import annotations

import math

import torch

from tinyformer import attention as A
from tinyformer.course.engine import Exercise, register
from tinyformer.course.engine import randint as _randint

CHAPTER = "02-attention"
F64 = torch.float64


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64) * scale


# --------------------------------------------------------------------------- the buggy-attention builder


def buggy_attention(*, scale="sqrt", axis=-1, fill="-inf", order="mask_first", scores="QK", split="contiguous",
                    merge="transpose", same_slice=False, mask="causal", values="V", transpose_W=False,
                    use_W_O=True, single_head=False, return_weights=False):
    """Causal (multi-head) attention with the mistakes named by the keywords; the defaults are right.

    scale: "sqrt" (÷√d_head), "none", "d" (÷d_head), "times_sqrt" (×√d_head), "sqrt_d_model", "sqrt_d_v".
    axis: the softmax's axis (-1 is right). fill: "-inf" or "zero" for the hidden scores.
    order: "mask_first", or "softmax_first" (softmax over every key, then the hidden weights zeroed,
    not renormalised). scores: "QK" or "KQ" (K Qᵀ: the transposed scores). split: "contiguous",
    "interleaved" or "no_transpose" (reshape straight to (..., n_heads, T, d_head)). merge:
    "transpose", "no_transpose" (reshape the (..., n_heads, T, d_head) heads straight back), "last_two"
    (transpose(-1, -2): T and d_head swapped, then reshaped) or "batch" (transpose(0, 1): batch and
    heads swapped, then reshaped).
    same_slice: every head uses head 0's slice. mask: "causal", "strict" (hides the diagonal) or
    "none". values: "V" or "X" (the inputs used as values). transpose_W: x @ W.T for every matrix.
    use_W_O: multiply by W_O. single_head: one head of width d_model. return_weights: return
    (weights, out), the weights without the head axis when there is one head.

    The returned function takes ``(x, W_Q, W_K, W_V, W_O=None, n_heads=1)``.
    """
    def project(x, W):
        return x @ W.transpose(-2, -1) if transpose_W else x @ W

    def to_heads(t, H):                                   # (..., T, H·d) -> (..., H, T, d)
        *lead, T, C = t.shape
        D = C // H
        if same_slice:
            return t[..., :D].unsqueeze(-3).expand(*lead, H, T, D)
        if split == "interleaved":
            return t.reshape(*lead, T, D, H).movedim(-1, -3)
        if split == "no_transpose":
            return t.reshape(*lead, H, T, D)
        return t.reshape(*lead, T, H, D).transpose(-3, -2)

    def from_heads(t):                                    # (..., H, T, d) -> (..., T, H·d)
        *lead, H, T, D = t.shape
        if merge == "no_transpose":
            return t.reshape(*lead, T, H * D)
        if merge == "last_two":
            return t.transpose(-1, -2).reshape(*lead, T, H * D)
        if merge == "batch":
            return t.transpose(-4, -3).reshape(*lead, T, H * D)
        if split == "interleaved":
            return t.movedim(-3, -1).reshape(*lead, T, H * D)
        return t.transpose(-3, -2).reshape(*lead, T, H * D)

    def attend(x, W_Q, W_K, W_V, W_O=None, n_heads=1):
        H = 1 if single_head else n_heads
        q, k = to_heads(project(x, W_Q), H), to_heads(project(x, W_K), H)
        v = to_heads(project(x, W_V) if values == "V" else x, H)
        s = q @ k.transpose(-2, -1) if scores == "QK" else k @ q.transpose(-2, -1)    # (..., H, T, T)
        d_head = q.shape[-1]
        s = {"sqrt": s / math.sqrt(d_head), "none": s, "d": s / d_head, "times_sqrt": s * math.sqrt(d_head),
             "sqrt_d_model": s / math.sqrt(x.shape[-1]), "sqrt_d_v": s / math.sqrt(v.shape[-1])}[scale]
        T = x.shape[-2]
        allowed = {"causal": torch.ones(T, T, dtype=torch.bool).tril(),
                   "strict": torch.ones(T, T, dtype=torch.bool).tril(-1), "none": None}[mask]
        if allowed is None:
            weights = torch.softmax(s, dim=axis)
        elif order == "mask_first":
            weights = torch.softmax(s.masked_fill(~allowed, float("-inf") if fill == "-inf" else 0.0), dim=axis)
        else:
            weights = torch.softmax(s, dim=axis).masked_fill(~allowed, 0.0)
        out = from_heads(weights @ v)                                             # (..., T, d_v)
        if W_O is not None and use_W_O:
            out = project(out, W_O)
        if return_weights:
            return (weights[..., 0, :, :] if H == 1 else weights), out
        return out
    return attend


def _head(**bugs):
    """A one-head variant with the drill's signature ``(x, W_Q, W_K, W_V)``."""
    attend = buggy_attention(**bugs)
    return lambda x, W_Q, W_K, W_V: attend(x, W_Q, W_K, W_V)


# --------------------------------------------------------------------------- 2.1 attention by hand


def by_hand_inputs() -> dict[str, torch.Tensor]:
    """The inputs of Exercise 2.1: three tokens with d_model = 2, d_k = 4 (so the scale is 1/2),
    d_v = 2. Rows are tokens: Q = X W_Q."""
    def t(rows):
        return torch.tensor(rows, dtype=F64)
    return {"X": t([[1, 0], [0, 1], [1, 1]]),
            "W_Q": t([[0, 0, 0, 0], [1, 1, 0, 0]]),
            "W_K": t([[1, 1, 0, 0], [0, 0, 1, 1]]),
            "W_V": t([[1, 0], [0, 2]])}


def _by_hand_reference():
    p = by_hand_inputs()
    X = p["X"]
    out, weights = A.scaled_dot_product_attention(X @ p["W_Q"], X @ p["W_K"], X @ p["W_V"], A.causal_mask(3))
    return weights, out                                   # (3, 3), (3, 2)


def _by_hand(**bugs):
    """A zero-argument variant of Exercise 2.1 that makes the mistakes named by ``bugs``."""
    attend = buggy_attention(return_weights=True, **bugs)

    def wrong():
        p = by_hand_inputs()
        return attend(p["X"], p["W_Q"], p["W_K"], p["W_V"])
    return wrong


BY_HAND_OUT = ("your weights are right but out is not: out = weights @ V, where V = X W_V (shape (3, 2)); "
               "row i of out is the weighted average of the rows of V.")
BY_HAND_TRANSPOSED = ("your weights are transposed: row i holds query i's weights over the keys (the columns), "
                      "so with the causal mask the matrix is lower triangular.")
BY_HAND_ROWS = ("the rows of your weights do not sum to 1: exponentiate each row's (scaled, masked) scores and "
                "divide by the row's sum.")


def _diagnose_by_hand(cases, outputs, refs):
    (w, _), (w_ref, _) = outputs[0], refs[0]

    def close(a, b):
        return bool(torch.allclose(a, b, rtol=0, atol=5e-3))

    if close(w, w_ref):
        return f"wrong output. Hint: {BY_HAND_OUT}"
    if close(w, w_ref.T):
        return f"wrong output. Hint: {BY_HAND_TRANSPOSED}"
    if not close(w.sum(-1), torch.ones(3, dtype=F64)):
        return f"wrong output. Hint: {BY_HAND_ROWS}"
    return None


register(Exercise(
    name="attention_by_hand", number="2.1", function="attention_by_hand", chapter=CHAPTER, args=(),
    library_answers=(
        "tinyformer.attention.scaled_dot_product_attention",
        "tinyformer.attention.attention_head",
        "tinyformer.attention.simple_attention",
        "tinyformer.attention.softmax",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    make_cases=lambda g: [()], reference=_by_hand_reference,
    returns="a tuple (weights, out): weights of shape (3, 3) and out of shape (3, 2)", item_names=("weights", "out"),
    exact_dtype=False, accept_lists=True, rtol=0.0, atol=5e-3,   # numbers rounded by hand to 3 decimals
    mistakes=[
        (_by_hand(scale="none"), "these are the weights of unscaled scores: divide q·k by √d_k = √4 = 2 "
                                 "before the softmax."),
        (_by_hand(scale="sqrt_d_model"), "you divided the scores by √d_model = √2; the scale is √d_k = √4 = 2, "
                                         "the width of the queries and keys."),
        (_by_hand(scale="d"), "you divided the scores by d_k = 4; divide by its square root, √d_k = 2."),
        (_by_hand(mask="none"), "no causal mask: query i sees keys 0..i only, so row 0 puts all its weight "
                                "on token 0; set the later keys' scores to -∞ before the softmax."),
        (_by_hand(axis=-2), "the softmax ran down the columns: each ROW (one query) must sum to 1, so "
                            "normalise over the keys of a row."),
        (_by_hand(values="X"), "the weights are right but you averaged the rows of X; the values are "
                               "V = X W_V, so out = weights @ (X W_V)."),
    ],
    diagnose=_diagnose_by_hand, diagnose_hints=(BY_HAND_OUT, BY_HAND_TRANSPOSED, BY_HAND_ROWS),
    generic_hint="work row by row: Q = X W_Q and K = X W_K, the scores q_i·k_j for j <= i divided by √d_k = 2, "
                 "a softmax over the row, then out_i = Σ_j weights_ij v_j with V = X W_V.",
))


# --------------------------------------------------------------------------- 2.2 a previous-token head


def _previous_token_reference(n_pos: int):
    W_Q = torch.zeros(n_pos, n_pos, dtype=F64)
    i = torch.arange(1, n_pos)
    W_Q[i, i - 1] = 60.0                                  # query i looks for the key of position i - 1
    return W_Q, torch.eye(n_pos, dtype=F64)               # keys: the one-hot positions themselves


def previous_token_weights(n_pos: int, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """The weights (n_pos, n_pos) of a causal head with these matrices on one-hot positions X = I."""
    X = torch.eye(n_pos, dtype=F64)
    _, weights = A.scaled_dot_product_attention(X @ W_Q, X @ W_K, X, A.causal_mask(n_pos))
    return weights


def _previous_token_ok(case, out, ref) -> bool:
    (n_pos,) = case
    w = previous_token_weights(n_pos, *out)
    i = torch.arange(1, n_pos)
    return bool(torch.isfinite(w).all() and (w[i, i - 1] >= 0.9).all())


PREV_SELF = ("this head attends to the current token: make query i match the key of position i - 1, "
             "not its own.")
PREV_NEXT = ("it points at the next token, which the causal mask hides: shift the other way, so that query i "
             "matches key i - 1.")
PREV_WEAK = ("the right key wins but not by enough: multiply the scores (remember the 1/√d_k, here "
             "1/√n_pos); row i has i + 1 keys competing, so key i - 1 needs a lead of about ln(9·i).")
PREV_TIE = ("no key stands out: several keys this query may see share the largest score, so they share the "
            "weight; give key i - 1 a larger score than every other key.")
PREV_NONFINITE = "your matrices contain NaN or inf: use a large but finite strength."


def _diagnose_previous_token(cases, outputs, refs):
    for (n_pos,), (W_Q, W_K) in zip(cases, outputs):
        if not (torch.isfinite(W_Q).all() and torch.isfinite(W_K).all()):
            return f"wrong output. Hint: {PREV_NONFINITE}"
        w = previous_token_weights(n_pos, W_Q, W_K)
        raw = W_Q @ W_K.T                                 # the unmasked, unscaled scores (X = I)
        for i in range(1, n_pos):
            if w[i, i - 1] >= 0.9:
                continue
            said = (f"with n_pos = {n_pos}, query {i} puts {w[i, i - 1].item():.2f} of its weight on key {i - 1} "
                    f"(0.9 needed).")
            row, seen = raw[i], raw[i, :i + 1]
            top = row.max()
            if (row == top).sum() == 1 and row[i] == top:
                return f"{said} Hint: {PREV_SELF}"
            if i + 1 < n_pos and (row == top).sum() == 1 and row[i + 1] == top:
                return f"{said} Hint: {PREV_NEXT}"
            others = torch.cat([seen[:i - 1], seen[i:]])
            if seen[i - 1] > others.max():
                return f"{said} Hint: {PREV_WEAK}"
            if (seen == seen.max()).sum() > 1:
                return f"{said} Hint: {PREV_TIE}"
            return f"{said} Its largest score is on key {int(seen.argmax())}."
    return None


register(Exercise(
    name="previous_token_head", number="2.2", function="previous_token_head", chapter=CHAPTER, args=("n_pos",),
    make_cases=lambda g: [(4,), (16,), (64,)], reference=_previous_token_reference,
    returns="a tuple (W_Q, W_K) of two (n_pos, n_pos) matrices", item_names=("W_Q", "W_K"),
    exact_dtype=False, compare=_previous_token_ok,
    diagnose=_diagnose_previous_token, diagnose_hints=(PREV_SELF, PREV_NEXT, PREV_WEAK, PREV_TIE, PREV_NONFINITE),
    generic_hint="with X = I, the scores are W_Q W_Kᵀ / √n_pos: entry (i, i - 1) must beat every other entry "
                 "j <= i of row i by enough for 0.9 of the weight.",
))


# --------------------------------------------------------------------------- 2.3 the sum over heads


def _sum_cases(g):
    cases = []
    for B, H, T, D in ((2, 3, 4, 2), (1, 4, 5, 3), (3, 2, 3, 4)):
        cases.append((_randn(g, B, H, T, D), _randn(g, H * D, H * D)))
    return cases


def _sum_with(block):
    """Σ_h heads[:, h] @ block(W_O, h, d_head), the sum over heads with a chosen block of W_O."""
    def total(heads, W_O):
        D = heads.shape[-1]
        return sum(heads[:, h] @ block(W_O, h, D) for h in range(heads.shape[1]))
    return total


SUM_ROWS_SHAPE = ("W_O^(h) is a block of ROWS of W_O, W_O[h·d_head:(h+1)·d_head, :], of shape "
                  "(d_head, d_model); a block of columns does not fit heads[:, h] of shape (B, T, d_head).")

register(Exercise(
    name="sum_over_heads", number="2.3", function="sum_over_heads", chapter=CHAPTER, args=("heads", "W_O"),
    library_answers=("tinyformer.attention.merge_heads",),
    make_cases=_sum_cases, reference=lambda heads, W_O: A.merge_heads(heads) @ W_O,
    returns="the output tensor of shape (B, T, d_model)",
    mistakes=[
        (_sum_with(lambda W, h, D: W[:, h * D:(h + 1) * D].T),
         "W_O^(h) is a block of ROWS of W_O, W_O[h·d_head:(h+1)·d_head, :]; you took a block of columns "
         "(and transposed it to make the shapes fit)."),
        (lambda heads, W_O: _sum_with(lambda W, h, D: W[h * D:(h + 1) * D])(heads, W_O) / heads.shape[1],
         "you averaged the heads; concat(heads) W_O is their SUM, Σ_h head_h W_O^(h)."),
        (_sum_with(lambda W, h, D: W[:D]),
         "every head was multiplied by the first block of W_O; head h needs its own block, rows "
         "h·d_head to (h+1)·d_head."),
        (lambda heads, W_O: A.merge_heads(heads),
         "the heads are concatenated but W_O is missing: multiply each head by its block of W_O and add."),
        (lambda heads, W_O: heads.reshape(heads.shape[0], heads.shape[2], -1) @ W_O,
         "reshaping (B, n_heads, T, d_head) straight to (B, T, d_model) mixes tokens and heads: move the head "
         "axis next to d_head first (transpose(1, 2)), or sum over heads with the blocks of W_O."),
    ],
    error_hints=[(RuntimeError, r"cannot be multiplied|Expected size for first two dimensions|size mismatch|"
                                r"must match the size|does not broadcast", SUM_ROWS_SHAPE)],
    generic_hint="head h (B, T, d_head) meets rows h·d_head to (h+1)·d_head of W_O; the products, each "
                 "(B, T, d_model), are added.",
))


# --------------------------------------------------------------------------- 2.4 a left-padded causal mask


def _padding_cases(g):
    """B >= 3 sequences per case; every case has a full-length sequence, a length-1 one, and
    lengths in between (so each mistake differs from the right mask whatever the seed)."""
    cases = [(torch.ones(3, dtype=torch.int64), 1)]
    for T, n_mid in ((5, 2), (8, 3)):
        mid = torch.randint(2, T, (n_mid,), generator=g)
        lengths = torch.cat([torch.tensor([T, 1]), mid])
        cases.append((lengths[torch.randperm(len(lengths), generator=g)], T))
    return cases


def _padding_parts(lengths, T):
    i = torch.arange(T).view(1, T, 1)                      # queries, down the rows
    j = torch.arange(T).view(1, 1, T)                      # keys, across the columns
    start = (T - lengths).view(-1, 1, 1)                   # the first real token of each sequence
    return i, j, start


def _padded_mask(lengths, T):
    i, j, start = _padding_parts(lengths, T)
    return (j <= i) & (j >= start)                         # (B, T, T)


def _padding_variant(allowed):
    def wrong(lengths, T):
        i, j, start = _padding_parts(lengths, T)
        return allowed(i, j, start, lengths.view(-1, 1, 1)).expand(len(lengths), T, T)
    return wrong


register(Exercise(
    name="left_padded_causal_mask", number="2.4", function="left_padded_causal_mask", chapter=CHAPTER,
    args=("lengths", "T"), make_cases=_padding_cases, reference=_padded_mask,
    returns="the (B, T, T) torch.bool mask",
    mistakes=[
        (_padding_variant(lambda i, j, s, n: (j <= i) & (j < n)),
         "this masks RIGHT padding (j < lengths[b]); the sequences are padded on the left: the real tokens "
         "are the last lengths[b] positions, so key j is real when j >= T - lengths[b]."),
        (_padding_variant(lambda i, j, s, n: j >= s),
         "the padding part is right but the causal part is missing: query i must not see later keys either "
         "(j <= i)."),
        (_padding_variant(lambda i, j, s, n: j <= i),
         "this is the causal mask alone: also hide the padding keys, j < T - lengths[b], from every query."),
        (_padding_variant(lambda i, j, s, n: (j <= i) & (j > s)),
         "off by one: the first real token is at position T - lengths[b] itself, so keep j >= T - lengths[b]."),
        (_padding_variant(lambda i, j, s, n: (j <= i) & (i >= s)),
         "the padding is applied to the queries (rows, i) instead of the keys (columns, j): it is the padded "
         "KEYS that no query may attend to."),
        (_padding_variant(lambda i, j, s, n: (j >= s - 1) & (j <= i)),
         "off by one: the first real token is at position T - lengths[b], so the pad just before it, "
         "T - lengths[b] - 1, must stay hidden: keep j >= T - lengths[b]."),
        (_padding_variant(lambda i, j, s, n: (j < i) & (j >= s)),
         "your mask hides the diagonal (j < i): a token must be allowed to attend to itself, so keep j <= i; "
         "otherwise the first real token sees nothing and its softmax is 0/0 = NaN."),
        (_padding_variant(lambda i, j, s, n: ~((j <= i) & (j >= s))),
         "True must mean *allowed*: you marked the hidden positions (later keys and padding); invert it."),
        (_padding_variant(lambda i, j, s, n: (j <= i) & (j >= n)),
         "lengths[b] counts the REAL tokens, not the pads: sequence b has T - lengths[b] pads, so key j is real "
         "when j >= T - lengths[b]."),
        (lambda lengths, T: _padded_mask(lengths, T)[:, None],
         "return (B, T, T); add the head axis with mask[:, None] where you use it."),
    ],
    generic_hint="sequence b's real tokens are its last lengths[b] positions; query i may see key j when "
                 "j <= i and j >= T - lengths[b]. Compare torch.arange(T) views that broadcast to (B, T, T).",
))


# --------------------------------------------------------------------------- 2.5 the FLOPs of a block


def block_flops_reference(T: int, d_model: int, d_ff: int) -> tuple[int, int, int]:
    """Forward FLOPs (2 per multiply-add) of one sequence's matrix products in one block:
    (W_Q, W_K, W_V, W_O projections; QKᵀ and weights @ V; the two feed-forward matmuls)."""
    return 8 * T * d_model ** 2, 4 * T ** 2 * d_model, 4 * T * d_model * d_ff


def _flops_cases(g):
    """GPT-2 small first (a fixed case, so the first failing case, and the hint, never depend on
    the seed), then random sizes with T != d_model and d_ff != 4·d_model."""
    cases = [(1024, 768, 3072)]
    for _ in range(2):
        d_model = 8 * _randint(g, 2, 16)
        T = _randint(g, 3, 60)
        T += T == d_model
        d_ff = _randint(g, 2 * d_model, 6 * d_model)
        d_ff += d_ff == 4 * d_model
        cases.append((T, d_model, d_ff))
    return cases


FLOPS_NO_WO = "projections: you counted three of the four: W_O, the output projection, costs 2·T·d_model² too."
FLOPS_PROJ_MAC = "projections: a multiply-add is 2 FLOPs; a (T, d) @ (d, d) product costs 2·T·d²."
FLOPS_QK_ONLY = ("attention: count both products, QKᵀ and weights @ V (2·T²·d_model each); the causal mask "
                 "does not reduce the count: the full matrices are multiplied.")
FLOPS_ONE_FFN = "feed_forward: there are two matmuls, d_model → d_ff and d_ff → d_model."
FLOPS_FOUR_D = "feed_forward: you assumed d_ff = 4·d_model; use the d_ff you are given."
FLOPS_PER_HEAD = ("attention: you counted one head (a fraction of 4·T²·d_model); count all of them: n_heads heads "
                  "of 4·T²·d_head each make 4·T²·d_model, so the head count cancels.")


def _per_head(T: int, d: int, got) -> bool:
    """Is ``got`` 4·T²·d_model / k for a whole k from 3 to 64 (a count for one head of k)? k = 2 is
    QKᵀ alone, named by its own hint."""
    full = 4 * T * T * d
    return type(got) in (int, float) and 0 < got < full and any(
        math.isclose(got * k, full, rel_tol=1e-12) for k in range(3, 65))


def _diagnose_flops(cases, outputs, refs):
    for (T, d, f), out, ref in zip(cases, outputs, refs):
        known = ({6 * T * d * d: FLOPS_NO_WO, 4 * T * d * d: FLOPS_PROJ_MAC}, {2 * T * T * d: FLOPS_QK_ONLY},
                 {2 * T * d * f: FLOPS_ONE_FFN, 16 * T * d * d: FLOPS_FOUR_D})
        parts = []
        for name, got, want, wrong in zip(("projections", "attention", "feed_forward"), out, ref, known):
            if got != want:
                per_head = name == "attention" and got not in wrong and _per_head(T, d, got)
                parts.append(FLOPS_PER_HEAD if per_head else wrong.get(got, f"{name}: wrong count."))
        if parts:
            return f"wrong output. Hint: {' '.join(parts)}"
    return None


register(Exercise(
    name="block_flops", number="2.5", function="block_flops", chapter=CHAPTER, args=("T", "d_model", "d_ff"),
    library_answers=("tinyformer.attention.attention_flops",),
    make_cases=_flops_cases, reference=block_flops_reference,
    returns="a tuple of three ints (projections, attention, feed_forward)",
    item_names=("projections", "attention", "feed_forward"),
    mistakes=[(lambda T, d, f: tuple(n // 2 for n in block_flops_reference(T, d, f)),
               "every count is half the right one: you counted multiply-adds; a multiply-add is 2 FLOPs.")],
    diagnose=_diagnose_flops,
    diagnose_hints=(FLOPS_NO_WO, FLOPS_PROJ_MAC, FLOPS_QK_ONLY, FLOPS_ONE_FFN, FLOPS_FOUR_D, FLOPS_PER_HEAD),
    generic_hint="a (m, k) @ (k, n) product costs 2·m·k·n FLOPs; list every product of the block with its shapes.",
))


# --------------------------------------------------------------------------- 2.6 all heads at once


def _mha_cases(g):
    cases = []
    for B, T, d_model, H in ((2, 5, 8, 2), (1, 6, 12, 3), (2, 4, 8, 4)):
        W = [_randn(g, d_model, d_model, scale=2 * d_model ** -0.5) for _ in range(4)]   # never symmetric
        cases.append((_randn(g, B, T, d_model), *W, H))
    return cases


def _mha(**bugs):
    return buggy_attention(**bugs)


MHA_TRANSPOSED_W = ("you multiplied by the transposed matrices (x @ W.T): nn.Linear stores its weight "
                    "transposed and computes x @ W.T, but these matrices are already oriented: q = x @ W_Q.")

register(Exercise(
    name="multi_head_attention", number="2.6", function="all_heads_at_once", chapter=CHAPTER,
    library_answers=(
        "tinyformer.attention.multi_head_attention",
        "tinyformer.attention.attend_heads",
        "tinyformer.attention.split_heads",
        "tinyformer.attention.merge_heads",
        "tinyformer.attention.MultiHeadAttention",
    ),
    args=("x", "W_Q", "W_K", "W_V", "W_O", "n_heads"), make_cases=_mha_cases,
    reference=lambda x, W_Q, W_K, W_V, W_O, n_heads: A.multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads),
    returns="the output tensor of shape (B, T, d_model)",
    mistakes=[
        (_mha(use_W_O=False), "the heads are concatenated but never mixed: multiply the concatenation by W_O."),
        (_mha(scale="sqrt_d_model"), "each head's scores must be divided by √d_head = √(d_model / n_heads), "
                                     "not by √d_model."),
        (_mha(scale="times_sqrt"), "you multiplied the scores by √d_head; divide by it."),
        (_mha(scale="none"), "the scores are not scaled: divide each head's Q Kᵀ by √d_head, "
                             "d_head = d_model // n_heads."),
        (_mha(scale="d"), "you divided the scores by d_head; divide by its square root, √d_head."),
        (_mha(axis=-2), "the softmax ran over the queries (dim=-2): each query's row of weights must sum to 1, "
                        "so take the softmax over the keys, dim=-1."),
        (_mha(mask="strict"), "your mask hides the diagonal (tril(-1), triu(0) or j < i): the diagonal must be "
                              "allowed, since a token attends to itself; otherwise the first row is all -inf and "
                              "its softmax is NaN."),
        (_mha(split="interleaved"), "the heads are interleaved: head h owns the contiguous features "
                                    "h·d_head:(h+1)·d_head, so reshape to (B, T, n_heads, d_head), then move "
                                    "the head axis."),
        (_mha(split="no_transpose", merge="no_transpose"),
         "reshaping (B, T, d_model) straight to (B, n_heads, T, d_head) mixes tokens and features: reshape to "
         "(B, T, n_heads, d_head), then transpose(1, 2); undo both to merge."),
        (_mha(merge="no_transpose"), "the split is right, but the merge reshapes (B, n_heads, T, d_head) "
                                     "straight to (B, T, d_model): transpose(1, 2) back first."),
        (_mha(merge="last_two"), "the merge swapped the last two axes (transpose(-1, -2) swaps T and d_head): "
                                 "the heads are (B, n_heads, T, d_head), so transpose(1, 2) to (B, T, n_heads, "
                                 "d_head), then reshape."),
        (_mha(merge="batch"), "the merge swapped the batch and head axes (transpose(0, 1)): the heads are "
                              "(B, n_heads, T, d_head), so transpose(1, 2) to (B, T, n_heads, d_head), then "
                              "reshape."),
        (_mha(same_slice=True), "every head uses the same slice of Q, K and V: head h takes features "
                                "h·d_head to (h+1)·d_head."),
        (_mha(scores="KQ"), "the scores are K Qᵀ, transposed: entry (i, j) must be q_i·k_j (query i, key j), "
                            "so compute Q Kᵀ."),
        (_mha(fill="zero"), "the hidden scores were set to 0, which still gets weight exp(0) > 0: fill them "
                            "with -inf (float('-inf'))."),
        (_mha(order="softmax_first"), "the softmax came before the mask, so the weights left after masking no "
                                      "longer sum to 1: mask the scores with -inf, then take the softmax."),
        (_mha(mask="none"), "there is no causal mask: every head must hide the keys after the query."),
        (_mha(single_head=True), "this is a single head over all d_model features; split Q, K and V into "
                                 "n_heads heads of width d_model / n_heads."),
        (_mha(transpose_W=True), MHA_TRANSPOSED_W),
    ],
    error_hints=[
        (RuntimeError, r"view size is not compatible",
         "after a transpose the tensor is not contiguous, so .view fails: use .reshape (or .contiguous().view)."),
        (RuntimeError, r"is invalid for input of size",
         "a reshape with the wrong sizes: (B, T, d_model) splits into (B, T, n_heads, d_head) with "
         "d_head = d_model // n_heads."),
        (TypeError, r"tuple of ints, ?but (found element of type|got) float",
         "d_model / n_heads is a float: use integer division, d_model // n_heads."),
    ],
    generic_hint="split with reshape(B, T, n_heads, d_head).transpose(1, 2), attend per head (scale √d_head, "
                 "causal mask, softmax over the keys), merge with the inverse, then multiply by W_O.",
))


# --------------------------------------------------------------------------- drill: a stable softmax


def _softmax_cases(g):
    rows = _randn(g, 5, 6, scale=0.1)
    rows[0] += torch.tensor([1000.0, 0, -5, 2, -3, 1], dtype=F64)    # a spread of 1000 inside one row
    rows[1] += torch.tensor([1000.0, 999, 998, 997, 996, 250], dtype=F64)  # max - min > 709 > max - mean
    rows[2] += 1000.0                                                 # exp overflows without a shift
    rows[3] -= 1000.0                                                 # far below the other rows
    return [(_randn(g, 4, 5),), (_randn(g, 2, 3, 7, scale=3.0),), (rows,)]


def _shifted_softmax(shift):
    def wrong(s):
        e = (s - shift(s)).exp()
        return e / e.sum(-1, keepdim=True)
    return wrong


register(Exercise(
    name="stable_softmax", number="", function="stable_softmax", chapter=CHAPTER, args=("scores",), drill=True,
    library_answers=("tinyformer.attention.softmax", "torch.nn.functional.softmax", "torch.softmax"),
    make_cases=_softmax_cases, reference=lambda s: A.softmax(s, dim=-1),
    returns="the tensor of weights, shaped like scores",
    mistakes=[
        (_shifted_softmax(lambda s: 0), "exp() overflows for large scores (exp(1000) is inf). Subtract each "
                                        "row's maximum before exponentiating."),
        (lambda s: A.softmax(s, dim=0), "you normalised over the first axis; normalise over the last one "
                                        "(dim=-1), so that every row sums to 1."),
        (_shifted_softmax(lambda s: s.max()), "you subtracted the maximum of the whole tensor; subtract each "
                                              "row's own maximum (amax(dim=-1, keepdim=True)), or rows far below "
                                              "it underflow to 0/0."),
        (_shifted_softmax(lambda s: s.amin(-1, keepdim=True)),
         "you subtracted each row's minimum: the largest exponent is then max - min, which overflows in a row "
         "with a large spread. Subtract the row's maximum, so every exponent is <= 0."),
        (_shifted_softmax(lambda s: s.mean(-1, keepdim=True)),
         "you subtracted each row's mean: the largest exponent is then max - mean, which overflows in a row "
         "with a large spread. Subtract the row's maximum, so every exponent is <= 0."),
        (lambda s: (s - s.amax(-1, keepdim=True)).exp(),
         "the rows do not sum to 1: divide the exponentials by their sum over the row."),
    ],
    error_hints=[(RuntimeError, r"must match the size of tensor b",
                  "a max or sum over the last axis dropped that axis, so it no longer lines up with the rows: "
                  "pass keepdim=True (amax(dim=-1, keepdim=True), sum(dim=-1, keepdim=True)).")],
    generic_hint="compare with torch.softmax(scores, dim=-1) on a small input, row by row.",
))


# --------------------------------------------------------------------------- drill: the causal mask


def _tril(T, diagonal=0):
    return torch.ones(T, T, dtype=torch.bool).tril(diagonal)


register(Exercise(
    name="causal_mask", number="", function="causal_mask", chapter=CHAPTER, args=("T",), drill=True,
    library_answers=("tinyformer.attention.causal_mask",),
    make_cases=lambda g: [(1,), (2,), (_randint(g, 3, 8),), (_randint(g, 9, 16),)],
    reference=lambda T: A.causal_mask(T), returns="the (T, T) torch.bool mask",
    mistakes=[
        (lambda T: _tril(T, -1), "the diagonal must be True: token i may attend to itself. With tril(-1) the "
                                 "first row is all False and its softmax is 0/0 = NaN."),
        (lambda T: ~_tril(T), "True must mean *allowed*. You marked the future positions, the ones to hide: "
                              "invert it."),
        (lambda T: _tril(T).T, "this is the upper triangle: row i (the query) may see columns 0..i, which is "
                               "the lower triangle."),
        (lambda T: torch.ones(T, T, dtype=torch.bool),
         "everything is allowed, so nothing is masked: a token would see the tokens after it."),
    ],
    generic_hint="row i should be True in columns 0..i and False after; compare with a 3x3 example drawn by hand.",
))


# --------------------------------------------------------------------------- drill: one attention head


def _head_cases(g):
    cases = []   # the first case is square (x @ W.T runs and gives values); the others are not
    for B, T, d_model, d_k, d_v in ((2, 4, 6, 6, 6), (2, 5, 8, 4, 6), (1, 7, 16, 8, 3), (3, 4, 6, 2, 5)):
        cases.append((_randn(g, B, T, d_model), _randn(g, d_model, d_k, scale=0.8), _randn(g, d_model, d_k, scale=0.8),
                      _randn(g, d_model, d_v)))
    return cases


register(Exercise(
    name="attention_head", number="", function="attention_head", chapter=CHAPTER, args=("x", "W_Q", "W_K", "W_V"),
    library_answers=(
        "tinyformer.attention.attention_head",
        "tinyformer.attention.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
    ),
    drill=True, make_cases=_head_cases,
    reference=lambda x, W_Q, W_K, W_V: A.scaled_dot_product_attention(
        x @ W_Q, x @ W_K, x @ W_V, A.causal_mask(x.shape[-2]))[0],
    returns="the output tensor (B, T, d_v), not the weights",
    mistakes=[
        (_head(scale="none"), "the scores are not scaled: divide QKᵀ by √d_k (d_k = the width of the keys)."),
        (_head(scale="d"), "you divided by d_k; divide by its square root, √d_k."),
        (_head(scale="times_sqrt"), "you multiplied the scores by √d_k; divide by it."),
        (_head(scale="sqrt_d_model"), "you divided by √d_model; the scale is √d_k, the width of the queries "
                                      "and keys (W_Q.shape[1])."),
        (_head(scale="sqrt_d_v"), "you divided by √d_v, the width of the values; the scale is √d_k, the width "
                                  "of the queries and keys."),
        (_head(axis=-2), "the softmax runs over the wrong axis: each *query's* row of weights must sum to 1, so "
                         "use dim=-1 (over the keys), not dim=-2."),
        (_head(mask="strict"), "your mask hides the diagonal (tril(-1) or triu(0)): a token must be allowed to "
                               "attend to itself, or the first row is all -inf and gives NaN."),
        (_head(mask="none"), "there is no causal mask: position i sees the tokens after it. Fill the scores "
                             "above the diagonal with -inf before the softmax."),
        (_head(fill="zero"), "the hidden scores were set to 0, which still gets weight exp(0) > 0: fill them "
                             "with -inf (float('-inf'))."),
        (_head(order="softmax_first"), "the softmax came before the mask, so the weights left after masking no "
                                       "longer sum to 1: mask the scores with -inf, then take the softmax."),
        (_head(scores="KQ"), "the scores are K Qᵀ, transposed: entry (i, j) must be q_i·k_j (query i, key j), "
                             "so compute Q Kᵀ."),
        (_head(transpose_W=True), MHA_TRANSPOSED_W),
    ],
    error_hints=[(RuntimeError, r"cannot be multiplied",
                  "a matrix product with mismatched shapes: vectors are rows here, so Q = x @ W_Q with W_Q of "
                  "shape (d_model, d_k); do not transpose the weights (nn.Linear stores its weight transposed, "
                  "these matrices are not).")],
    generic_hint="check the order Q = x @ W_Q, K = x @ W_K, V = x @ W_V; scores Q @ K.transpose(-2, -1) / √d_k; "
                 "mask; softmax over the last axis; then weights @ V.",
))
