"""Chapter 5's checks: every solution passes, every stub is 'not implemented yet', every registered
mistake is caught by its own hint whatever the seed, and wrong answers written here, the way a
learner would write them, fail with the hint that names their slip. These generic tests are written
once, in tests/exercise_suite.py; the ``globals().update(SUITE...)`` lines below take in (and name)
those this chapter runs.

The solutions and wrong answers below are written independently of ``tinyformer.course.ch05``: the
nucleus with NumPy and Python loops (sorted(), math.exp), Hugging Face's ascending-sort filter, and
torch in float32 where a learner's code would be; the parameter count by arithmetic; the decoding
loop with eos_id into a preallocated output, and as learners write it with torch.cat (a finished
mask kept with masked_fill or torch.where, nanoGPT's top-k, the classic top-p); the cycle's weights
from angles, with other scales and geometries. The references are checked against a brute-force
nucleus (Python floats, sorted by hand), against the sizes of the parameters of GPT(config) itself,
GPT-2 small built on the meta device, and (5.6) against a loop written here, row by row in Python,
with a count of its torch.multinomial calls: one per step, on the (B, V) float32 probabilities, with
the generator it was given. The chapter notebook (book/05-gpt.ipynb) is optional here: the tests
that read it are skipped while it does not exist.
"""

from __future__ import annotations

import math
import textwrap

import exercise_suite
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_suite import SEEDS, verdict_for

from tinyformer import checks, sampling
from tinyformer.course import ch05, engine
from tinyformer.model import GPT, GPTConfig

from conftest import BOOK, define

CHAPTER = ["nucleus_probs", "gpt_params", "sample_tokens", "cycle_weights"]
DRILLS: list[str] = []
ALL = CHAPTER + DRILLS
NOTEBOOK = BOOK / "05-gpt.ipynb"
F64 = torch.float64
GPT2_SMALL = 124_439_808

# --------------------------------------------------------------------------- solutions (exercise cells)

SOLUTIONS = {
    "nucleus_probs": '''\
import numpy as np
import torch


def nucleus_probs(logits, top_p, temperature=1.0):
    """The distribution top-p sampling draws from: softmax(logits / T),
    kept on the nucleus (the fewest most likely tokens whose probability
    reaches top_p) and renormalised. logits: (..., V)."""
    # BEGIN SOLUTION
    V = logits.shape[-1]
    z = logits.numpy().reshape(-1, V) / temperature     # (rows, V)
    out = np.zeros_like(z)
    for r, row in enumerate(z):
        p = np.exp(row - row.max())
        p = p / p.sum()                                 # softmax
        mass = 0.0
        for i in sorted(range(V), key=lambda i: -p[i]):  # likeliest first
            if mass >= top_p:                           # nucleus complete
                break
            out[r, i] = p[i]
            mass += p[i]
        out[r] /= out[r].sum()                          # renormalise
    return torch.from_numpy(out.reshape(logits.shape))
    # END SOLUTION
''',
    "gpt_params": '''\
def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """The exact number of parameters of the book's GPT (learned
    positions, pre-norm, biases, d_ff = 4·d_model)."""
    # BEGIN SOLUTION
    d = d_model
    attention = 4 * (d * d + d)           # W_Q, W_K, W_V, W_O, their biases
    ffn = d * 4 * d + 4 * d + 4 * d * d + d   # W_1, b_1, W_2, b_2
    norms = 2 * (d + d)                   # ln_1, ln_2: a gain and a bias
    block = attention + ffn + norms
    total = vocab_size * d + block_size * d   # token and position tables
    total += n_layer * block + (d + d)        # the blocks, then ln_f
    if not tie_weights:
        total += d * vocab_size           # the LM head's own matrix
    return total
    # END SOLUTION
''',
    "sample_tokens": '''\
import torch
import torch.nn.functional as F


def sample_tokens(model, idx, max_new_tokens, temperature=1.0,
                  generator=None, eos_id=None):
    """The prompt idx (B, T) followed by up to max_new_tokens tokens, each
    drawn from the model's next-token distribution given the tokens
    before; a row that has generated eos_id repeats it, and decoding stops
    once every row has."""
    # BEGIN SOLUTION
    B, T = idx.shape
    window = model.config.block_size
    out = torch.empty(B, T + max_new_tokens, dtype=idx.dtype)
    out[:, :T] = idx
    done = torch.zeros(B, 1, dtype=torch.bool)    # has the row ended?
    with torch.no_grad():
        for t in range(T, T + max_new_tokens):
            context = out[:, max(0, t - window):t]    # the newest tokens
            last = model(context)[:, -1]              # (B, V)
            probs = F.softmax(last / temperature, dim=-1)
            new = torch.multinomial(probs, 1, generator=generator)
            if eos_id is not None:
                new = torch.where(done, eos_id, new)  # ended rows: eos
                done = done | (new == eos_id)
            out[:, t:t + 1] = new
            if eos_id is not None and bool(done.all()):
                return out[:, :t + 1]                 # every row ended
    return out
    # END SOLUTION
''',
    "cycle_weights": '''\
import math

import torch


def cycle_weights(n):
    """E (n, 2) and W_U (2, n), float64, such that a model whose logits
    after token a are E[a] @ W_U predicts (a + 1) % n with p >= 0.9."""
    # BEGIN SOLUTION
    step = 2 * math.pi / n
    angle = torch.arange(n, dtype=torch.float64) * step   # token a's
    E = torch.stack([angle.cos(), angle.sin()], dim=1)    # (n, 2)
    behind = angle - step                   # column b points at E[b - 1]
    W_U = torch.stack([behind.cos(), behind.sin()])       # (2, n)
    # the logit of b after a is s * cos(angle[a] - angle[b] + step):
    # s for b = a + 1, s * cos(step) for its neighbours, less for others
    return E, 10 * n * W_U
    # END SOLUTION
''',
}

SUITE = exercise_suite.Chapter(CHAPTER, DRILLS, SOLUTIONS, NOTEBOOK)
solution = SUITE.solution


# --------------------------------------------------------------------------- 5.1, as learners write it


def learner_nucleus(rule="front<p", descending=True, temperature_at="start", renormalise=True, back="scatter",
                    output="probs", softmax_dim=-1, cumulate="sorted", dtype=None):
    """A learner's torch top-p filter, with the slip chosen by the keywords.

    rule: "front<p" (right: cum - p_sorted < top_p), "cum<=p" (crossing token out), "cum<=p+top",
    "cum<p" (crossing token out, strictly), "shift>p" (the classic 'cum > p, shifted right', which
    keeps one token too many when the nucleus reaches top_p exactly). temperature_at: "start",
    "end" (nucleus at T = 1), "never", "times". back: "scatter", "none" (sorted order), "gather".
    output: "probs", "logits" (the filtered logits, -inf outside), "log_probs", "mask" (bool),
    "float_mask". cumulate: "sorted", "logits" (the sorted logits added up), "vocab" (unsorted).
    dtype: compute in this dtype (float32) and return it.
    """
    def nucleus_probs(logits, top_p, temperature=1.0):
        x = logits if dtype is None else logits.to(dtype)
        if temperature_at == "start":
            x = x / temperature
        elif temperature_at == "times":
            x = x * temperature
        probs = F.softmax(x, dim=softmax_dim)
        if cumulate == "vocab":
            sorted_probs, idx = probs, torch.arange(x.shape[-1]).expand(x.shape)
        else:
            sorted_probs, idx = torch.sort(probs, dim=-1, descending=descending)
        summed = torch.gather(x, -1, idx) if cumulate == "logits" else sorted_probs
        cum = torch.cumsum(summed, dim=-1)
        if rule == "front<p":
            keep_sorted = cum - summed < top_p
        elif rule == "cum<=p":
            keep_sorted = cum <= top_p
        elif rule == "cum<p":
            keep_sorted = cum < top_p
        elif rule == "cum<=p+top":
            keep_sorted = cum <= top_p
            keep_sorted[..., 0] = True
        else:                                                   # "shift>p"
            remove = cum > top_p
            remove[..., 1:] = remove[..., :-1].clone()
            remove[..., 0] = False
            keep_sorted = ~remove
        if back == "scatter":
            keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        elif back == "gather":
            keep = torch.gather(keep_sorted, -1, idx)
        else:
            keep, x = keep_sorted, torch.gather(x, -1, idx)
        if temperature_at == "end":
            x = x / temperature
        if output == "mask":
            return keep
        if output == "float_mask":
            return keep.to(logits.dtype)
        filtered = x.masked_fill(~keep, -math.inf)
        if output == "logits":
            return filtered
        if output == "log_probs":
            return F.log_softmax(filtered, dim=-1)
        if not renormalise:
            return F.softmax(x, dim=softmax_dim) * keep
        return F.softmax(filtered, dim=softmax_dim)
    return nucleus_probs


def nucleus_logits_times_mask(logits, top_p, temperature=1.0):
    """The keep mask multiplied into the logits: 0, not -inf, outside the nucleus."""
    z = logits / temperature
    probs, order = torch.sort(F.softmax(z, dim=-1), dim=-1, descending=True)
    keep_sorted = probs.cumsum(-1) - probs < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return F.softmax(z * keep, dim=-1)


def nucleus_temperature_for_the_cut_only(logits, top_p, temperature=1.0):
    probs = F.softmax(logits / temperature, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return F.softmax(logits.masked_fill(~keep, -math.inf), dim=-1)   # the untempered logits


def nucleus_sorted_mask_on_vocab(logits, top_p, temperature=1.0):
    z = logits / temperature
    sorted_probs, _ = torch.sort(F.softmax(z, dim=-1), dim=-1, descending=True)
    keep = sorted_probs.cumsum(-1) - sorted_probs < top_p             # in sorted order, never put back
    return F.softmax(z.masked_fill(~keep, -math.inf), dim=-1)


def nucleus_with_a_tolerance(tolerance):
    def nucleus_probs(logits, top_p, temperature=1.0):
        z = logits / temperature
        sorted_probs, order = torch.sort(F.softmax(z, dim=-1), dim=-1, descending=True)
        keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p - tolerance   # "to be safe"
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        return F.softmax(z.masked_fill(~keep, -math.inf), dim=-1)
    return nucleus_probs


def nucleus_hugging_face(logits, top_p, temperature=1.0):
    """transformers' TopPLogitsWarper: sort ascending, remove the tokens whose cumulative probability
    (from the least likely) is <= 1 - top_p, always keep the most likely one (right)."""
    scores = logits / temperature
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    sorted_indices_to_remove[..., -1:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(-1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("inf")).softmax(dim=-1)


def nucleus_python(logits, top_p, temperature=1.0):
    """Pure Python: every row as a list of floats, math.exp, sorted() (right)."""
    rows = logits.reshape(-1, logits.shape[-1]).tolist()
    out = []
    for row in rows:
        z = [v / temperature for v in row]
        top = max(z)
        e = [math.exp(v - top) for v in z]
        p = [v / sum(e) for v in e]
        order = sorted(range(len(p)), key=lambda i: (-p[i], i))
        kept, mass = [], 0.0
        for i in order:
            if mass >= top_p:
                break
            kept.append(i)
            mass += p[i]
        total = sum(p[i] for i in kept)
        out.append([p[i] / total if i in kept else 0.0 for i in range(len(p))])
    return torch.tensor(out, dtype=F64).reshape(logits.shape)


def nucleus_by_top_k(logits, top_p, temperature=1.0):
    """The nucleus found as the smallest k whose top-k probabilities reach top_p (right)."""
    probs = torch.softmax(logits / temperature, dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.zeros_like(flat)
    for r in range(flat.shape[0]):
        values, idx = flat[r].topk(flat.shape[1])
        k = int((values.cumsum(0) - values < top_p).sum())
        out[r, idx[:k]] = values[:k] / values[:k].sum()
    return out.reshape(probs.shape)


def nucleus_inverse_permutation(logits, top_p, temperature=1.0):
    """argsort, gather, and back through the inverse permutation; torch.where, divided by the sum (right)."""
    probs = (logits / temperature).softmax(dim=-1)
    order = probs.argsort(dim=-1, descending=True)
    sorted_probs = probs.gather(-1, order)
    keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
    keep = keep_sorted.gather(-1, order.argsort(dim=-1))
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def nucleus_in_place(logits, top_p, temperature=1.0):
    logits /= temperature
    return learner_nucleus()(logits, top_p)


def nucleus_float32_inside(logits, top_p, temperature=1.0):
    return learner_nucleus()(logits.float(), top_p, temperature).double()


def nucleus_no_default(logits, top_p, temperature):
    return learner_nucleus()(logits, top_p, temperature)


def nucleus_sort_attribute(logits, top_p, temperature=1.0):
    sorted_logits = torch.sort(logits / temperature, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    return probs


def nucleus_sort_passed_on(logits, top_p, temperature=1.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs = torch.sort(probs, descending=True)
    cum = torch.cumsum(sorted_probs, dim=-1)
    return cum


def nucleus_float_index(logits, top_p, temperature=1.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs < top_p).to(probs.dtype)
    mask = torch.zeros_like(probs).scatter(-1, order.to(probs.dtype), keep)
    return probs * mask / (probs * mask).sum(-1, keepdim=True)


def nucleus_scatter_bool_into_float(logits, top_p, temperature=1.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    keep = torch.zeros_like(probs).scatter(-1, order, keep_sorted)
    return probs * keep / (probs * keep).sum(-1, keepdim=True)


def nucleus_float_mask_fill(logits, top_p, temperature=1.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs >= top_p).double()
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return torch.softmax((logits / temperature).masked_fill(drop, -math.inf), dim=-1)


def nucleus_two_sizes(logits, top_p, temperature=1.0):
    """Written for (B, V) only."""
    B, V = logits.shape
    return learner_nucleus()(logits, top_p, temperature)


def nucleus_dim_1(logits, top_p, temperature=1.0):
    """dim=1 everywhere: right for (B, V), out of range for (V,)."""
    probs = torch.softmax(logits / temperature, dim=1)
    sorted_probs, order = probs.sort(dim=1, descending=True)
    keep_sorted = sorted_probs.cumsum(dim=1) - sorted_probs < top_p
    keep = keep_sorted.scatter(1, order, keep_sorted)
    return torch.softmax((logits / temperature).masked_fill(~keep, -math.inf), dim=1)


def nucleus_cumsum_without_dim(logits, top_p, temperature=1.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    return sorted_probs.cumsum()


def nucleus_above_threshold(logits, top_p, temperature=1.0):
    """Keeps the tokens whose own probability is at least 1 - top_p: not a nucleus."""
    probs = torch.softmax(logits / temperature, dim=-1)
    keep = probs >= 1 - top_p
    keep = keep | (probs == probs.max(dim=-1, keepdim=True).values)
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)


def nucleus_sum_without_keepdim(logits, top_p, temperature=1.0):
    """Renormalises by kept.sum(-1): (B, V) / (B,) does not broadcast."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    kept = probs * keep_sorted.scatter(-1, order, keep_sorted)
    return kept / kept.sum(-1)


def nucleus_temperature_squared(logits, top_p, temperature=1.0):
    """The right nucleus, its probabilities at temperature² (the logits divided twice)."""
    keep = learner_nucleus()(logits, top_p, temperature) > 0
    return torch.softmax((logits / temperature ** 2).masked_fill(~keep, -math.inf), dim=-1)


def nucleus_softmax_again(logits, top_p, temperature=1.0):
    """Zeroes the tokens outside the nucleus, then 'renormalises' with a second softmax."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    return torch.softmax(probs * mask, dim=-1)


def nucleus_temperature_on_probs(logits, top_p, temperature=1.0):
    """Divides the probabilities, not the logits, by the temperature."""
    probs = torch.softmax(logits, dim=-1) / temperature
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    kept = probs * mask
    return kept / kept.sum(dim=-1, keepdim=True)


def nucleus_strict_first_forced(logits, top_p, temperature=1.0):
    """Keeps a token while the cumulative sum is < top_p, and forces the top token in."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(-1) < top_p
    keep[..., 0] = True
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    kept = probs * mask
    return kept / kept.sum(dim=-1, keepdim=True)


NUCLEUS_WRONG = [
    (nucleus_logits_times_mask, "e^0 is not 0"),
    (nucleus_temperature_for_the_cut_only, "returned untempered probabilities"),
    (nucleus_sorted_mask_on_vocab, "your keep mask is in sorted order"),
    (nucleus_with_a_tolerance(1e-3), "your boundary has a tolerance"),
    (nucleus_with_a_tolerance(1e-4), "your boundary has a tolerance"),
    (nucleus_softmax_again, "you took a softmax of the kept probabilities"),
    (nucleus_temperature_on_probs, "you divided the probabilities by temperature, not the logits"),
    (nucleus_strict_first_forced, "yours stops one token early (cumulative < top_p)"),
    (learner_nucleus(rule="shift>p"), "a total that reaches top_p exactly stops there (cumulative >= top_p)"),
    (learner_nucleus(rule="cum<=p"), "Yours even kept no token at all when the top token's probability exceeds"),
    (learner_nucleus(rule="cum<=p+top"), "yours keeps only those whose cumulative sum is <= top_p"),
    (learner_nucleus(rule="cum<p"), "some rows came out NaN: the nucleus was empty"),
    (learner_nucleus(descending=False), "your nucleus holds the LEAST likely tokens"),
    (learner_nucleus(renormalise=False), "the kept probabilities are not renormalised"),
    (learner_nucleus(renormalise=False, temperature_at="never"), "each row must sum to 1 over the nucleus"),
    (learner_nucleus(temperature_at="end"), "temperature comes first"),
    (learner_nucleus(temperature_at="never"), "the temperature argument is ignored"),
    (learner_nucleus(temperature_at="times"), "you multiplied the logits by temperature"),
    (learner_nucleus(cumulate="logits"), "you added up the logits"),
    (learner_nucleus(cumulate="vocab"), "your cumulative sum runs in vocabulary order"),
    (learner_nucleus(back="none"), "your output is in sorted order"),
    (learner_nucleus(back="gather"), "you un-sorted with gather(-1, order)"),
    (learner_nucleus(output="logits"), "Return probabilities: softmax of the filtered logits."),
    (learner_nucleus(output="log_probs"), "Return probabilities: softmax of the filtered logits."),
    (learner_nucleus(output="float_mask"), "you returned the nucleus mask (1 inside, 0 outside)"),
    (learner_nucleus(output="mask"), "returned dtype torch.bool; expected torch.float64"),
    (learner_nucleus(softmax_dim=0), "a softmax over dim=0 normalises across the rows of the batch"),
    (learner_nucleus(dtype=torch.float32), "returned torch.float32 for torch.float64 inputs"),
    (nucleus_float32_inside, "computed in float32 and cast back"),
    (nucleus_in_place, "changed its input `logits` in place (its output is right)"),
    (nucleus_no_default, "temperature has a default"),
    (nucleus_sort_attribute, "torch.sort returns a pair (values, indices), not a tensor: unpack it"),
    (nucleus_sort_passed_on, "you passed the result of torch.sort on as a tensor"),
    (nucleus_float_index, "scatter and gather take an integer index (torch.long)"),
    (nucleus_scatter_bool_into_float, "scatter writes src into a tensor of its own dtype"),
    (nucleus_float_mask_fill, "masked_fill needs a torch.bool mask"),
    (nucleus_two_sizes, "do not unpack logits.shape into two sizes"),
    (nucleus_dim_1, "logits may be 1-D, of shape (V,), where dim=1 does not exist"),
    (nucleus_cumsum_without_dim, "torch.cumsum needs the axis to add along"),
    (nucleus_sum_without_keepdim, "keep the axis, kept.sum(dim=-1, keepdim=True)"),
    (nucleus_above_threshold, "for logits of shape (2, 5), top_p = 0.7, temperature = 1 (row 1 of 2) you kept 1 "
                              "token; the nucleus holds 3. Hint: divide the logits by temperature"),
    (nucleus_temperature_squared, "wrong values. Hint: divide the logits by temperature, take the softmax"),
    (lambda logits, top_p, temperature=1.0: learner_nucleus()(logits, top_p, temperature)[..., :-1],
     "output shape (2, 4), expected (2, 5) for logits of shape (2, 5), top_p = 0.7, temperature = 1.0."),
    (lambda logits, top_p, temperature=1.0: (learner_nucleus()(logits, top_p, temperature), top_p),
     "return only the (..., V) float64 probabilities"),
    (lambda logits, top_p, temperature=1.0: learner_nucleus()(logits, top_p, temperature).numpy(),
     "returned a numpy.ndarray of shape (2, 5); return a torch.Tensor"),
    (lambda logits, top_p, temperature=1.0: None, "did you forget the `return` line?"),
]


# --------------------------------------------------------------------------- 5.2, as learners write it


def learner_count(*, positions=True, tokens=True, head="untied", head_bias=False, linear_biases=True,
                  attention_biases=True, b_1="4d", norm_biases=True, block_norms=2, final_norm=True, w_o=True,
                  hidden=4, blocks="n_layer", as_float=False):
    """A learner's count, one parameter tensor at a time, with the slip chosen by the keywords.

    positions: True (right), False or "plus1" (block_size + 1 rows). head: "untied" (right: its own matrix
    only when untied), "always", "never", "tied" (the tie read the wrong way round). head_bias: False
    (right), True (a head bias of vocab_size numbers always) or "untied" (only with its own matrix).
    attention_biases: False leaves out the biases of W_Q, W_K, W_V, W_O. b_1: "4d" (right) or "d".
    """
    def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
        d, f = d_model, hidden * d_model
        shapes = []
        projections = 4 if w_o else 3
        shapes += [(d, d)] * projections + ([(d,)] * projections if linear_biases and attention_biases else [])
        shapes += [(d, f), (f, d)] + ([(f if b_1 == "4d" else d,), (d,)] if linear_biases else [])
        shapes += [(d,), (d,)] * block_norms if norm_biases else [(d,)] * block_norms
        per_block = sum(math.prod(s) for s in shapes)
        total = per_block * (n_layer if blocks == "n_layer" else 1)
        if final_norm:
            total += 2 * d if norm_biases else d
        total += vocab_size * d if tokens else 0
        total += {True: block_size, False: 0, "plus1": block_size + 1}[positions] * d
        if head == "always" or (head == "untied" and not tie_weights) or (head == "tied" and tie_weights):
            total += d * vocab_size
        total += vocab_size if head_bias is True or (head_bias == "untied" and not tie_weights) else 0
        return total / 1 if as_float else total
    return gpt_params


def params_qkv_unbiased(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """W_Q, W_K, W_V without biases, W_O with its bias: 3·d_model short per block, as b_1 counted as d_model."""
    d = d_model
    block = 4 * d * d + d + (8 * d * d + 5 * d) + 4 * d
    head = 0 if tie_weights else vocab_size * d
    return (vocab_size + block_size) * d + n_layer * block + 2 * d + head


def params_numpy(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """The count as a NumPy integer (right)."""
    d = np.int64(d_model)
    block = 12 * d * d + 13 * d
    return (vocab_size + block_size) * d + n_layer * block + 2 * d + (0 if tie_weights else vocab_size * d)


def params_0d_tensor(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    return torch.tensor(learner_count()(vocab_size, block_size, n_layer, d_model, tie_weights))


def params_no_default(vocab_size, block_size, n_layer, d_model, tie_weights):
    return learner_count()(vocab_size, block_size, n_layer, d_model, tie_weights)


def params_kaplan(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    return 12 * n_layer * d_model ** 2


def params_weights_only(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """12·L·d² plus the embeddings and the untied head: the weight matrices and tables alone."""
    head = 0 if tie_weights else vocab_size * d_model
    return 12 * n_layer * d_model ** 2 + (vocab_size + block_size) * d_model + head


def params_without_b2(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """Every part counted, but the FFN's second bias forgotten."""
    d = d_model
    block = 4 * (d * d + d) + (d * 4 * d + 4 * d) + 4 * d * d + 2 * 2 * d
    total = vocab_size * d + block_size * d + n_layer * block + 2 * d
    return total + (0 if tie_weights else vocab_size * d)


def params_final_norm_gain_only(vocab_size, block_size, n_layer, d_model, tie_weights=True):
    """Every block right, the final layer norm counted as its gain alone (d_model)."""
    d = d_model
    block = 12 * d * d + 13 * d
    head = 0 if tie_weights else vocab_size * d
    return (vocab_size + block_size) * d + n_layer * block + d + head


PARAMS_WRONG = [
    (params_final_norm_gain_only, "the final layer norm ln_f has a gain AND a bias"),
    (params_without_b2, "each block is d_model short: one bias vector of width d_model is missing"),
    (params_kaplan, "12·n_layer·d_model² is Kaplan et al.'s estimate"),
    (learner_count(positions=False), "the position embeddings are missing"),
    (learner_count(tokens=False), "the token embedding is missing"),
    (learner_count(head="always"), "you counted the LM head although it is tied"),
    (learner_count(head="never"), "the LM head is missing in the untied model"),
    (learner_count(head_bias=True), "the LM head has no bias"),
    (learner_count(head_bias="untied"), "your untied LM head has a bias"),   # "biases in every linear layer"
    (learner_count(linear_biases=False), "the biases are missing: in each block"),
    (learner_count(block_norms=0, final_norm=False), "the layer norms are missing"),
    (learner_count(final_norm=False), "the final layer norm is missing"),
    (learner_count(norm_biases=False), "each layer norm has a gain AND a bias"),
    (learner_count(w_o=False), "the output projection W_O (d_model², and its bias) is missing"),
    (learner_count(hidden=1), "the feed-forward network's hidden width is d_ff = 4·d_model"),
    (learner_count(blocks="one"), "you counted one block: the GPT stacks n_layer of them"),
    (learner_count(b_1="d"), "each block is 3·d_model short: b_1, the FFN's first bias, has 4·d_model numbers"),
    (params_qkv_unbiased, "each block is 3·d_model short: b_1, the FFN's first bias, has 4·d_model numbers"),
    (learner_count(attention_biases=False), "the four attention projections have biases too"),
    (learner_count(block_norms=1), "each block has TWO layer norms"),
    (learner_count(head="tied"), "the tie is the other way round"),
    (learner_count(positions="plus1"), "you counted block_size + 1"),
    (learner_count(norm_biases=False, b_1="d"),
     "wrong count: two slips. Hint: each layer norm has a gain AND a bias, 2·d_model numbers: you counted d_model "
     "per norm. And each block is 3·d_model short"),
    (learner_count(as_float=True), "the count is right but it is a float: return an int"),
    (lambda *a: float(params_kaplan(*a)), "12·n_layer·d_model² is Kaplan et al.'s estimate"),
    (learner_count(positions=False, final_norm=False),
     "wrong count: two slips. Hint: the position embeddings are missing: a table of block_size × d_model learned "
     "vectors, one per position. And the final layer norm is missing"),
    (learner_count(linear_biases=False, norm_biases=False),
     "wrong count: two slips. Hint: the biases are missing: in each block the four projections have d_model each, "
     "the FFN's b_1 has 4·d_model and b_2 d_model. And each layer norm has a gain AND a bias"),
    (learner_count(w_o=False, positions=False), "wrong count: two slips. Hint: the position embeddings are missing"),
    (params_weights_only,                               # no biases, no layer norms
     "wrong count: two slips. Hint: the biases are missing: in each block the four projections have d_model each, "
     "the FFN's b_1 has 4·d_model and b_2 d_model. And the layer norms are missing"),
    (lambda *a: learner_count()(*a) + 1, "for vocab_size = 50257, block_size = 1024, n_layer = 12, d_model = 768, "
                                         "tie_weights = True you counted 124,439,809; the GPT has 124,439,808 (1 "
                                         "too many). Hint: list every parameter tensor with its shape"),
    (params_no_default, "tie_weights has a default"),
    (lambda *a: str(learner_count()(*a)), "returned a str; return the parameter count, an int"),
    (lambda *a: (learner_count()(*a), 0), "returned a tuple of 2 items; return the parameter count, an int"),
    (lambda *a: None, "returned None; return the parameter count, an int"),
]


# --------------------------------------------------------------------------- 5.6, as learners write it


def learner_sampler(*, crop="last", logits_at=-1, keepdim=False, temperature_op="divide", normalise="softmax",
                    softmax_dim=-1, pick="multinomial", use_generator=True, squeeze=False, as_float=False,
                    cat_dim=1, prepend=False, returned="all", block_size_from="config", steps="all", extra=None,
                    eos="mask", stop="all"):
    """A learner's decoding loop with torch.cat, the slip chosen by the keywords.

    crop: "last" (right), "none", "first" (the first block_size tokens), "token" (the last token alone),
    "minus-one" (the last block_size - 1). logits_at: the position read. keepdim: read logits[:, -1:] (B, 1, V).
    temperature_op: "divide" (right), "multiply", "ignore", "divide-probs" (the probabilities divided after the
    softmax). normalise: "softmax" (right), "none" (the logits themselves), "log" (log_softmax), "float64" (the
    softmax in float64: right). pick: "multinomial" (right), "argmax", "per-row" (one multinomial per row:
    right). use_generator: False draws from the global generator. squeeze: the new tokens as (B,). as_float:
    the new tokens appended as floats. cat_dim: the axis appended along. prepend: the new tokens put in front.
    returned: "all" (right), "new", "with-mask" (the tokens and the finished mask) or "mask". block_size_from:
    "config" (right) or "model" (model.block_size). steps: "all" (right) or "one-less". extra: None (right),
    "top-k" (nanoGPT's top-k 50), "top-p" (the classic 'cumulative > 0.99, shifted right'), "min-p" (0.01).
    eos: "mask" (right: masked_fill), "where" (right: torch.where), "ignore", "keep-sampling" (the finished
    rows go on sampling; the loop stops once every row has drawn eos_id), "active-only" (a draw for the running
    rows only), "prompt" (a row whose prompt holds eos_id starts finished), "prompt-each-step" (finished
    recomputed from the whole sequence every step), "last-column" (finished = the last column is eos_id),
    "unguarded" (no `eos_id is not None` test), "flat" (the mask of shape (B,), not (B, 1)), "flat-inplace" (the
    same, updated with |=). stop: "all" (right), "never", "any".
    """
    def sample_tokens(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
        block_size = model.config.block_size if block_size_from == "config" else model.block_size
        prompt_len = idx.shape[1]
        uses_eos = eos_id is not None or eos == "unguarded"
        finished = torch.zeros(idx.shape[0], 1, dtype=torch.bool)
        if eos in ("flat", "flat-inplace"):
            finished = torch.zeros(idx.shape[0], dtype=torch.bool)                  # (B,), not (B, 1)
        if eos_id is not None and eos == "prompt":
            finished = (idx == eos_id).any(dim=1, keepdim=True)
        for _ in range(max_new_tokens if steps == "all" else max_new_tokens - 1):
            if eos_id is not None and eos == "prompt-each-step":
                finished = (idx == eos_id).any(dim=1, keepdim=True)
            elif eos_id is not None and eos == "last-column":
                finished = idx[:, -1:] == eos_id
            if crop == "last":
                context = idx[:, -block_size:]
            elif crop == "minus-one":
                context = idx[:, -block_size + 1:]
            elif crop == "first":
                context = idx[:, :block_size]
            elif crop == "token":
                context = idx[:, -1:]
            else:
                context = idx
            logits = model(context)
            logits = logits[:, -1:, :] if keepdim else logits[:, logits_at, :]
            if temperature_op == "divide":
                logits = logits / temperature
            elif temperature_op == "multiply":
                logits = logits * temperature
            if extra == "top-k":
                v, _ = torch.topk(logits, min(50, logits.size(-1)))
                logits = logits.clone()
                logits[logits < v[:, [-1]]] = -float("Inf")
            elif extra == "top-p":
                sorted_logits, sorted_indices = torch.sort(logits, descending=True)
                cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
                remove = cumulative > 0.99
                remove[..., 1:] = remove[..., :-1].clone()
                remove[..., 0] = False
                logits = logits.masked_fill(remove.scatter(1, sorted_indices, remove), -float("inf"))
            elif extra == "min-p":
                p = F.softmax(logits, dim=-1)
                logits = logits.masked_fill(p < 0.01 * p.max(dim=-1, keepdim=True).values, -float("inf"))
            if normalise == "softmax":
                probs = F.softmax(logits, dim=softmax_dim)
            elif normalise == "float64":
                probs = F.softmax(logits.double(), dim=softmax_dim)
            elif normalise == "log":
                probs = F.log_softmax(logits, dim=softmax_dim)
            else:
                probs = logits
            if temperature_op == "divide-probs":
                probs = probs / temperature
            gen = generator if use_generator else None
            if pick == "argmax":
                next_id = probs.argmax(dim=-1, keepdim=True)
            elif pick == "per-row":
                next_id = torch.stack([torch.multinomial(row, 1, generator=gen) for row in probs])
            elif eos == "active-only" and eos_id is not None:
                active = ~finished[:, 0]
                next_id = torch.full((idx.shape[0], 1), eos_id)
                next_id[active] = torch.multinomial(probs[active], num_samples=1, generator=gen)
            else:
                next_id = torch.multinomial(probs, num_samples=1, generator=gen)
            if uses_eos and eos == "item":                          # nanoGPT's B = 1 habit
                if next_id.item() == eos_id:
                    break
            elif uses_eos and eos == "reassigned":
                finished = next_id == eos_id                         # this step's rows only
            elif uses_eos and eos != "ignore":
                if eos == "where":
                    next_id = torch.where(finished, eos_id, next_id)
                elif eos == "pad-zero":
                    next_id = next_id.masked_fill(finished, 0)
                elif eos != "keep-sampling":
                    next_id = next_id.masked_fill(finished, eos_id)
                if eos == "flat-inplace":
                    finished |= next_id == eos_id
                else:
                    finished = finished | (next_id == eos_id)
            if uses_eos and stop == "before-append" and finished.all():
                break
            if squeeze:
                next_id = next_id.squeeze(-1)
            if as_float:
                next_id = next_id.float()
            idx = torch.cat((next_id, idx) if prepend else (idx, next_id), dim=cat_dim)
            if uses_eos and eos not in ("ignore", "item") and ((stop == "all" and finished.all()) or
                                                 (stop == "any" and finished.any())):
                break
        if returned == "mask":
            return finished
        if returned == "with-mask":
            return idx, finished
        return idx if returned == "all" else idx[:, prompt_len:]
    return sample_tokens


def sample_without_eos(model, idx, max_new_tokens, temperature=1.0, generator=None):
    """The chapter's plain loop, with the old signature (no eos_id)."""
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.config.block_size:])[:, -1, :]
        probs = torch.softmax(logits / temperature, dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=1)
    return idx


def sample_into_float_buffer(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
    """Right tokens (eos_id ignored), written into a float32 buffer (torch.zeros' default dtype) and returned so."""
    B, T = idx.shape
    out = torch.zeros(B, T + max_new_tokens)
    out[:, :T] = idx
    for t in range(T, T + max_new_tokens):
        logits = model(out[:, max(0, t - model.config.block_size):t].long())[:, -1, :]
        out[:, t] = torch.multinomial(F.softmax(logits / temperature, dim=-1), 1, generator=generator)[:, 0]
    return out


def sample_own_generator(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
    """Reproducible, but from a generator of its own: valid tokens, not the seeded ones."""
    own = torch.Generator().manual_seed(1234)
    return learner_sampler()(model, idx, max_new_tokens, temperature, own, eos_id)


def sample_softmax_everywhere(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
    """The softmax over every position of (B, T, V), then the last row read; the ended rows tracked as a list of
    bools and overwritten row by row (right)."""
    ended = [False] * idx.shape[0]
    with torch.no_grad():
        for _ in range(max_new_tokens):
            probs = torch.softmax(model(idx[:, -model.config.block_size:]) / temperature, dim=-1)[:, -1, :]
            new = probs.multinomial(1, generator=generator)
            if eos_id is not None:
                for b in range(len(ended)):
                    if ended[b]:
                        new[b, 0] = eos_id
                    ended[b] = ended[b] or int(new[b, 0]) == eos_id
            idx = torch.cat([idx, new], dim=-1)
            if eos_id is not None and all(ended):
                break
    return idx


def sample_unnormalised(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
    """exp(logits / T) as torch.multinomial's weights, never normalised (right: it normalises them); the
    finished rows found afterwards, from the first eos_id of each row (right too)."""
    model.eval()
    T = idx.shape[1]
    for _ in range(max_new_tokens):
        z = model(idx[:, -model.config.block_size:])[:, -1, :] / temperature
        weights = torch.exp(z - z.max(dim=-1, keepdim=True).values)
        new = torch.multinomial(weights, 1, replacement=True, generator=generator)
        if eos_id is not None:
            seen = (idx[:, T:] == eos_id).any(dim=1, keepdim=True)       # generated before: finished
            new[seen] = eos_id
        idx = torch.cat((idx, new), dim=1)
        if eos_id is not None and (idx[:, T:] == eos_id).any(dim=1).all():
            break
    return idx


SAMPLE_TUPLE = ("returned a tuple of 2 items; return only the int64 token ids, the prompt followed by the new tokens, "
                "shape (B, T + max_new_tokens) or fewer columns when every row has finished (the tokens only, without "
                "the finished mask).")

SAMPLE_WRONG = [
    (learner_sampler(eos="item"), "a B = 1 habit"),
    (learner_sampler(eos="pad-zero"), "a finished row is padded with eos_id, not 0"),
    (learner_sampler(eos="reassigned"), "you never use eos_id"),
    (learner_sampler(stop="before-append"), "you stopped before appending the token that finished the last row"),
    (learner_sampler(crop="none"), "crop the context to the LAST block_size tokens before each call"),
    (learner_sampler(crop="first"), "you cropped to the FIRST block_size tokens"),
    (learner_sampler(crop="token"), "you fed the model the last token alone"),
    (learner_sampler(crop="minus-one"), "you cropped the context to block_size - 1 tokens"),
    (learner_sampler(logits_at=0), "you read the logits of the FIRST position"),
    (learner_sampler(keepdim=True), "torch.multinomial takes the (B, V) probabilities of the last position"),
    (learner_sampler(normalise="none"), "torch.multinomial draws from probabilities (weights >= 0)"),
    (learner_sampler(normalise="log"), "torch.multinomial draws from probabilities (weights >= 0)"),
    (learner_sampler(temperature_op="multiply"), "the logits were multiplied by temperature"),
    (learner_sampler(temperature_op="ignore"), "your tokens do not depend on temperature"),
    (learner_sampler(temperature_op="divide-probs"), "your tokens do not depend on temperature"),
    (learner_sampler(softmax_dim=0), "a softmax over dim=0 normalises across the rows of the batch"),
    (learner_sampler(pick="argmax"), "you took the most likely token (greedy decoding)"),
    (learner_sampler(use_generator=False), "two runs with the same seeded generator gave different tokens"),
    (learner_sampler(squeeze=True), "torch.multinomial(probs, 1) gives the new tokens as (B, 1)"),
    (learner_sampler(as_float=True), "token ids must stay integers (int64)"),
    (learner_sampler(cat_dim=0), "the new tokens go at the end of each row, along the time axis"),
    (learner_sampler(prepend=True), "your output does not start with the prompt"),
    (learner_sampler(returned="new"), "you returned the new tokens alone"),
    (learner_sampler(block_size_from="model"), "the context length is in the model's configuration"),
    (learner_sampler(steps="one-less"), "output shape (3, 10), expected (3, 11) for model = a GPT, idx of shape "
                                        "(3, 5), max_new_tokens = 6, temperature = 1.0, generator = a "
                                        "torch.Generator, eos_id = None."),
    (sample_into_float_buffer, "returned dtype torch.float32; expected torch.int64, the dtype of the inputs"),
    (sample_own_generator, "wrong values. Hint: each step: crop the context to the last block_size tokens"),
    (lambda model, idx, *a: (learner_sampler()(model, idx, *a), idx), SAMPLE_TUPLE),
    (lambda *a: None, "did you forget the `return` line?"),
    # the filters a learner adds out of habit
    (learner_sampler(extra="top-k"), "you kept only the 50 likeliest tokens (top-k)"),
    (learner_sampler(extra="top-p"), "you cut the distribution to a nucleus (top-p)"),
    (learner_sampler(extra="min-p"), "you dropped the tokens below a fraction of the most likely one (min-p)"),
    # eos_id
    (sample_without_eos, "sample_tokens takes a sixth argument, eos_id, with a default"),
    (learner_sampler(eos="unguarded"), "eos_id may be None (its default: no end-of-text token, the plain loop)"),
    (learner_sampler(eos="ignore"), "you never use eos_id"),
    (lambda model, idx, n, temperature=1.0, generator=None, eos_id=None:  # `if eos_id:` skips eos_id = 0
     learner_sampler()(model, idx, n, temperature, generator, eos_id or None), "`if eos_id:` reads it as no eos_id"),
    (learner_sampler(eos="keep-sampling"), "yours went on sampling in the finished rows"),
    (learner_sampler(eos="active-only"), "you drew tokens for the running rows only (probs[~finished])"),
    (learner_sampler(eos="flat"), "your finished mask has shape (B,) and the new tokens (B, 1)"),
    (learner_sampler(eos="flat-inplace"), "finished |= (next_id == eos_id) cannot hold its result"),
    (learner_sampler(eos="flat", pick="per-row"), "your finished mask has shape (B,) and the new tokens (B, 1)"),
    (learner_sampler(stop="never"), "decoding stops as soon as every row has finished: yours always runs"),
    (learner_sampler(stop="any"), "you stopped as soon as ONE row finished"),
    (learner_sampler(eos="prompt"), "an eos_id inside the prompt does not count"),
    (learner_sampler(eos="prompt-each-step"), "an eos_id inside the prompt does not count"),
    (learner_sampler(eos="last-column"), "an eos_id inside the prompt does not count"),
    (learner_sampler(eos="where", returned="with-mask"), SAMPLE_TUPLE),
    (learner_sampler(returned="mask"), "your function returned dtype torch.bool; expected torch.int64"),
]


# --------------------------------------------------------------------------- 5.7, as learners write them


def learner_cycle(*, scale=100.0, step=-1, tied=False, layout="right", half=False):
    """A learner's (E, W_U): tokens on the unit circle at angles 2πa/n (πa/n with half); column b of W_U at the
    angle of token b + step (-1 is right), times scale (a number, or a function of n). tied: W_U = scale·Eᵀ.
    layout: "right", "transposed" (E (2, n), W_U (n, 2)), "logits" (E @ W_U returned), "probs" (its softmax),
    "lists"."""
    def cycle_weights(n):
        theta = (1 if half else 2) * math.pi * torch.arange(n, dtype=torch.float64) / n
        E = torch.stack([torch.cos(theta), torch.sin(theta)], dim=1)
        s = scale(n) if callable(scale) else scale
        turn = step * (1 if half else 2) * math.pi / n
        W_U = s * E.T if tied else s * torch.stack([torch.cos(theta + turn), torch.sin(theta + turn)])
        if layout == "transposed":
            return E.T, W_U.T
        if layout == "logits":
            return E @ W_U
        if layout == "probs":
            return torch.softmax(E @ W_U, dim=-1)
        if layout == "lists":
            return E.tolist(), W_U.tolist()
        return E, W_U
    return cycle_weights


def cycle_one_hot(n):
    """d_model = n: one-hot rows, and W_U a scaled permutation (a right table for a wider model)."""
    E = torch.eye(n, dtype=torch.float64)
    return E, 50.0 * torch.roll(E, 1, dims=1)


def cycle_float32(n):
    """The angles of torch.arange(n) / n: float32 (right: the exercise takes either float dtype)."""
    theta = 2 * math.pi * torch.arange(n) / n
    E = torch.stack([theta.cos(), theta.sin()], dim=1)
    return E, 100 * torch.roll(E, 1, dims=0).T


def cycle_three_wide(n):
    """A third dimension, unused."""
    theta = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    E = torch.stack([theta.cos(), theta.sin(), torch.zeros(n, dtype=torch.float64)], dim=1)
    return E, 100 * torch.roll(E, 1, dims=0).T


def cycle_linspace(n):
    """torch.linspace(0, 2π, n): both ends included, so tokens 0 and n - 1 coincide."""
    theta = torch.linspace(0, 2 * math.pi, n, dtype=torch.float64)
    E = torch.stack([theta.cos(), theta.sin()], dim=1)
    return E, 100 * torch.roll(E, 1, dims=0).T


CYCLE_WRONG = [
    (cycle_linspace, "tokens 0 and n - 1 sit on the same point of the circle"),
    (learner_cycle(tied=True, scale=1.0), "for n = 3, token 0 gives token 1 a probability of 0.154 (0.9 needed); "
                                          "its likeliest next token is 0, itself. Hint: your model predicts each "
                                          "token itself, as the tied choice W_U = Eᵀ does"),
    (learner_cycle(tied=True, scale=30.0), "as the tied choice W_U = Eᵀ does"),
    (learner_cycle(step=1), "your model predicts a - 1: the cycle runs backwards"),
    (learner_cycle(scale=1.0), "for n = 3, token 0 gives token 1 a probability of 0.691 (0.9 needed); its likeliest "
                               "next token is 1. Hint: the next token in the cycle is the likeliest, but with a "
                               "probability under 0.9: scale W_U up"),
    (learner_cycle(scale=5.0), "for n = 8, token 0 gives token 1 a probability of 0.677 (0.9 needed); its "
                               "likeliest next token is 1. Hint: a scale that is enough for a few tokens is not "
                               "enough for many"),
    (learner_cycle(scale=lambda n: n), "for n = 8, token 0 gives token 1 a probability of 0.838 (0.9 needed); its "
                                       "likeliest next token is 1. Hint: a scale that is enough for a few tokens"),
    (learner_cycle(layout="transposed"), "E has shape (2, 3) and W_U (3, 2) for n = 3. Hint: E and W_U are "
                                         "transposed"),
    (cycle_one_hot, "E has shape (3, 3) and W_U (3, 3) for n = 3, expected (3, 2) and (2, 3). Hint: this model is "
                    "two-dimensional, d_model = 2"),
    (cycle_three_wide, "E has shape (3, 3) and W_U (3, 3) for n = 3, expected (3, 2) and (2, 3). Hint: this model "
                       "is two-dimensional, d_model = 2"),
    (learner_cycle(layout="logits"), "returned a tensor of shape (3, 3); return the pair (E, W_U) of real "
                                     "weights, E of shape (n, 2) and W_U of shape (2, n) (the matrices themselves, "
                                     "not the logits E @ W_U or their softmax)"),
    (learner_cycle(layout="probs"), "returned a tensor of shape (3, 3); return the pair (E, W_U) of real "
                                    "weights, E of shape (n, 2) and W_U of shape (2, n) (the matrices themselves, "
                                    "not the logits E @ W_U or their softmax)"),
    (learner_cycle(scale=math.inf), "your matrices contain NaN or inf: use a large but finite scale"),
    (learner_cycle(half=True), "its likeliest next token is 2. Hint: put the rows of E on the unit circle"),
    (learner_cycle(layout="lists"), "E is a list of 3 items; return a torch.Tensor"),
    (lambda n: learner_cycle()(n)[0], "returned a tensor of shape (3, 2); return the pair (E, W_U)"),
]


WRONG = [("nucleus_probs", fn, phrase) for fn, phrase in NUCLEUS_WRONG] + \
        [("gpt_params", fn, phrase) for fn, phrase in PARAMS_WRONG] + \
        [("sample_tokens", fn, phrase) for fn, phrase in SAMPLE_WRONG] + \
        [("cycle_weights", fn, phrase) for fn, phrase in CYCLE_WRONG]


# What a check must refuse without raising: the odd answers of every chapter, and this chapter's own.
BAD = {
    **exercise_suite.odd_answers((2, 5)),
    "nested-list": lambda *a: [[0.5, 0.5, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]],
    "wrong-shape": lambda *a: torch.zeros(1, dtype=F64),
    "inf": lambda *a: torch.full((2, 5), math.inf, dtype=F64),
    "minus-inf": lambda *a: torch.full((2, 5), -math.inf, dtype=F64),
    "zeros": lambda *a: torch.zeros(2, 5, dtype=F64),
    "uniform": lambda *a: torch.full((2, 5), 0.2, dtype=F64),
    "meta": lambda *a: torch.empty(2, 5, dtype=F64, device="meta"),
    "int-tensor": lambda *a: torch.zeros(2, 5, dtype=torch.int64),
    "float": lambda *a: 7.5,
    "nan-float": lambda *a: math.nan,
    "inf-float": lambda *a: math.inf,
    "numpy-float": lambda *a: np.float64(1.0),
    "huge": lambda *a: torch.full((2, 5), 1e308, dtype=F64),
}


# --------------------------------------------------------------------------- the generic tests

# Written once, in tests/exercise_suite.py (its docstring says what each checks); chapter 5 runs these.
globals().update(
    # test_solution_passes, test_solution_passes_for_every_seed, test_solution_code_fits_the_page (79 columns),
    # test_stub_is_not_implemented
    SUITE.solution_tests(page_width=79)
    # test_the_chapter_has_a_cell_for_every_checked_exercise, test_chapter_solution_passes_for_every_seed
    | SUITE.notebook_tests()
    # test_every_registered_mistake_is_caught_by_its_own_hint,
    # test_the_cases_tell_every_mistake_from_the_reference_and_the_others (apart by more than 1e-3 somewhere, so a
    # learner's version of a slip is never taken for another)
    | SUITE.registered_mistake_tests(apart_by=1e-3)
    # the fixture wrong_verdicts; test_wrong_answer_gets_its_hint_whatever_the_seed (each answer of WRONG),
    # test_every_registered_hint_is_earned_by_a_wrong_answer, test_wrong_answers_get_different_verdicts
    | SUITE.wrong_answer_tests(WRONG)
    # test_any_wrong_answer_fails_without_raising (each answer of BAD), test_the_diagnoses_never_raise
    | SUITE.odd_answer_tests(BAD) | SUITE.diagnosis_tests()
    # test_another_device_is_named: the suite's test turns the output into one tensor (torch.as_tensor), which 5.7's
    # pair of tensors of different shapes is not: test_the_pair_on_the_meta_device_is_named, below, moves each
    | exercise_suite.Chapter(CHAPTER[:3], DRILLS, SOLUTIONS, NOTEBOOK).meta_device_tests()
    # test_seed_changes_the_inputs (float64 tensors, and 5.6's int64 prompts: its models and generators are stored
    # as seeds; 5.7's cases are the sizes n, the same for every seed), test_cases_travel_to_the_sandbox_and_back
    # (these answers too)
    | SUITE.case_tests(fixed=["cycle_weights"], dtypes=(torch.float64, torch.int64))
    | SUITE.travel_tests([BAD["tuple"], BAD["meta"], BAD["ndarray"], BAD["float"], learner_nucleus(back="none"),
                          learner_count(positions=False), learner_sampler(pick="argmax"),
                          learner_sampler(use_generator=False), learner_sampler(eos="active-only"),
                          learner_sampler(eos="prompt"), learner_cycle(tied=True), learner_cycle(scale=5.0)])
    # test_every_hint_is_written_once
    | SUITE.hint_tests()
)


# --------------------------------------------------------------------------- the registry


def test_chapter_five_registry():
    SUITE.assert_registry(numbers=["5.1", "5.2", "5.6", "5.7"])
    assert checks.EXERCISES["nucleus_probs"].args == ("logits", "top_p", "temperature")
    assert checks.EXERCISES["gpt_params"].args == ("vocab_size", "block_size", "n_layer", "d_model", "tie_weights")
    assert checks.EXERCISES["sample_tokens"].args == ("model", "idx", "max_new_tokens", "temperature", "generator",
                                                      "eos_id")
    assert checks.EXERCISES["cycle_weights"].args == ("n",)
    assert checks.EXERCISES["cycle_weights"].item_names == ("E", "W_U")


def test_the_library_answers_name_functions():
    for name in ALL:
        keys = engine.library_answer_keys(checks.EXERCISES[name])
        named = {dotted for *_, dotted in keys["code"]}
        assert all(any(n == a or n.startswith(a + ".") for n in named) for a in checks.EXERCISES[name].library_answers)
    assert "tinyformer.model.GPT.__init__" in {d for *_, d in engine.library_answer_keys(
        checks.EXERCISES["gpt_params"])["code"]}


# --------------------------------------------------------------------------- solutions and stubs


def test_a_nucleus_that_calls_an_unfinished_exercise_is_told_so(capsys):
    def nucleus_probs(logits, top_p, temperature=1.0):
        raise NotImplementedError("gpt_params is not implemented yet")

    exercise_suite.assert_it_calls_an_unfinished(checks.check_nucleus_probs(nucleus_probs), "gpt_params", "5.2")
    capsys.readouterr()


# --------------------------------------------------------------------------- learners' wrong answers


def test_the_nucleus_that_reaches_p_exactly_is_named_on_the_dyadic_case(wrong_verdicts):
    """The classic filter (cumulative > p, shifted right) is right but on the exact case, where it keeps a
    third token: it is told that a nucleus reaching p stops there."""
    k = next(i for i, (_, fn, phrase) in enumerate(WRONG) if phrase.startswith("a total that reaches top_p"))
    ex = checks.EXERCISES["nucleus_probs"]
    cases = checks.cases_for(ex, 0)
    outs = checks.run_cases(WRONG[k][1], cases).outputs
    wrong = [i for i, (c, o) in enumerate(zip(cases, outs)) if not torch.allclose(o, ex.reference(*c))]
    assert wrong == [2] and int((outs[2] != 0).sum()) == 3
    assert wrong_verdicts[k][0].message.endswith(f"Hint: {ch05.NUCLEUS_EXACT}")


def test_nearly_right_fails(capsys):
    exercise_suite.assert_nearly_right_fails("nucleus_probs", solution("nucleus_probs"))
    capsys.readouterr()


def test_the_count_is_judged_exactly_and_as_an_int(capsys):
    right = solution("gpt_params")
    assert checks.check_gpt_params(lambda *a: np.int64(right(*a)))
    assert checks.check_gpt_params(lambda *a: torch.tensor(right(*a)))
    for wrong in (lambda *a: right(*a) + 1, lambda *a: right(*a) - 1, lambda *a: float(right(*a)),
                  lambda *a: torch.tensor(float(right(*a))), lambda *a: right(*a) > 0):
        verdict = checks.check_gpt_params(wrong)
        assert not verdict and verdict.status == checks.FAIL, verdict.message
    capsys.readouterr()


# --------------------------------------------------------------------------- other right answers pass


@pytest.mark.parametrize("right", [learner_nucleus(), nucleus_hugging_face, nucleus_python, nucleus_by_top_k,
                                   nucleus_inverse_permutation,
                                   lambda logits, top_p, temperature=1.0: sampling.next_token_distribution(
                                       logits, temperature, top_p=top_p)])
def test_other_right_nuclei_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("nucleus_probs", right, seed)
        assert verdict.passed, (seed, verdict.message)


@pytest.mark.parametrize("right", [learner_count(), params_numpy, params_0d_tensor,
                                   lambda V, T, L, d, tie_weights=True: int(ch05.gpt_param_count(GPTConfig(
                                       vocab_size=V, block_size=T, n_layer=L, n_head=1, d_model=d,
                                       tie_weights=tie_weights)))])
def test_other_right_counts_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("gpt_params", right, seed)
        assert verdict.passed, (seed, verdict.message)


@pytest.mark.parametrize("right", [learner_sampler(), learner_sampler(eos="where"),
                                   learner_sampler(normalise="float64"), learner_sampler(pick="per-row"),
                                   sample_softmax_everywhere, sample_unnormalised,
                                   lambda model, idx, n, temperature=1.0, generator=None, eos_id=None:
                                   sampling.generate(model, idx, n, temperature=temperature, generator=generator,
                                                     eos_id=eos_id, use_cache=False)])
def test_other_right_loops_pass(right):
    """torch.multinomial(probs, 1) draws V exponentials per row and takes argmax(probs / draws): the same tokens
    for probabilities in float64, for one call per row, and for weights that are not normalised. The finished rows
    kept with masked_fill, with torch.where, as a list of bools, or found again from the tokens at every step."""
    for seed in SEEDS:
        verdict = verdict_for("sample_tokens", right, seed)
        assert verdict.passed, (seed, verdict.message)


def cycle_clockwise(n):
    """Another geometry: the tokens turn clockwise, with a phase, and the scale sits in E (W_U's columns are unit
    vectors), E's rows of unequal length (right)."""
    theta = -2 * math.pi * torch.arange(n, dtype=F64) / n + 0.3
    radius = 12.0 * n * (1 + torch.arange(n, dtype=F64) / n)                 # 12n to 24n
    E = radius[:, None] * torch.stack([theta.cos(), theta.sin()], dim=1)
    back = theta + 2 * math.pi / n                                           # column b where E[b - 1] points
    return E, torch.stack([back.cos(), back.sin()])


def cycle_by_rotation(n):
    """E on the circle, W_U = s·R Eᵀ with R the rotation by -2π/n of column vectors, s = 100 (right)."""
    theta = torch.linspace(0, 2 * math.pi, n + 1, dtype=F64)[:-1]
    E = torch.stack([theta.cos(), theta.sin()], dim=1)
    c, s = math.cos(2 * math.pi / n), math.sin(2 * math.pi / n)
    R = torch.tensor([[c, s], [-s, c]], dtype=F64)
    return E, 100 * R @ E.T


@pytest.mark.parametrize("right", [learner_cycle(scale=100.0), learner_cycle(scale=lambda n: 10 * n),
                                   learner_cycle(scale=50.0), cycle_clockwise, cycle_by_rotation, cycle_float32],
                         ids=["s100", "s10n", "s50", "clockwise", "rotation", "float32"])
def test_other_right_cycles_pass(right):
    for seed in SEEDS:
        verdict = verdict_for("cycle_weights", right, seed)
        assert verdict.passed, (seed, verdict.message)


def test_the_cycle_is_judged_by_what_the_model_predicts():
    """Not against the reference: a scale of 100 passes where the reference's is 10·n, and p >= 0.9 is the
    line (a scale just under the one that gives 0.9 at n = 16 fails, just over it passes)."""
    def at_scale(s):
        return learner_cycle(scale=s)
    # p(a + 1 | a) at n = 16 for the scale s: 1 / (1 + Σ_k exp(-s (1 - cos 2πk/16)))
    def p16(s):
        return 1 / (1 + sum(math.exp(-s * (1 - math.cos(2 * math.pi * k / 16))) for k in range(1, 16)))
    low, high = 1.0, 100.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if p16(mid) < 0.9 else (low, mid)
    assert not verdict_for("cycle_weights", at_scale(low * (1 - 1e-6)), 0).passed
    assert verdict_for("cycle_weights", at_scale(high * (1 + 1e-6)), 0).passed
    assert 35 < high < 40
    E, W_U = ch05.cycle_weights_reference(16)
    assert E.dtype == W_U.dtype == F64 and E.shape == (16, 2) and W_U.shape == (2, 16)
    assert torch.allclose(E.norm(dim=1), torch.ones(16, dtype=F64))
    probs = ch05.cycle_probs(E, W_U)
    assert bool((probs.argmax(dim=-1) == (torch.arange(16) + 1) % 16).all())
    assert float(probs.max(dim=-1).values.min()) > 0.99


def test_the_tied_model_cannot_follow_a_cycle():
    """Part (b) of 5.7: with W_U = s·Eᵀ the logits s·E Eᵀ are symmetric, and with rows of equal length every
    token's largest logit is its own, whatever the rows and the scale."""
    g = torch.Generator().manual_seed(0)
    for n in (3, 5, 8):
        for _ in range(20):
            E = torch.randn(n, 2, generator=g, dtype=F64)
            E = E / E.norm(dim=1, keepdim=True)
            logits = 7.0 * E @ E.T
            assert torch.allclose(logits, logits.T, rtol=0, atol=1e-12)
            assert bool((logits.diagonal() == logits.max(dim=-1).values).all())


def test_the_pair_on_the_meta_device_is_named(capsys):
    right = solution("cycle_weights")
    verdict = checks.check_cycle_weights(lambda n: tuple(t.to("meta") for t in right(n)))
    capsys.readouterr()
    assert not verdict and "E is a tensor on the meta device, which holds no values" in verdict.message


# --------------------------------------------------------------------------- the cases


def kept(probs: torch.Tensor) -> list[int]:
    return (probs != 0).sum(dim=-1).reshape(-1).tolist()


def test_the_nucleus_cases_are_built_to_expose_the_mistakes():
    ex = checks.EXERCISES["nucleus_probs"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        dims = [c[0].dim() for c in cases]
        assert dims[0] == 2 and 1 in dims and dims.count(3) == 1
        temperatures = [c[2] if len(c) == 3 else 1.0 for c in cases]
        assert {0.5, 1.0, 2.0} <= set(temperatures) and any(len(c) == 2 for c in cases)
        assert any(c[1] == 1.0 for c in cases)
        assert all(0 < c[1] <= 1 and isinstance(c[1], float) for c in cases)
        assert all(t > 0 and isinstance(t, float) for t in temperatures)
        refs = [ex.reference(*c) for c in cases]
        assert any(set(kept(r)) == {1} for r in refs)                           # the top token alone
        assert any(all(k == c[0].shape[-1] for k in kept(r)) for c, r in zip(cases, refs))   # top_p = 1: all
        for c, r in zip(cases, refs):                                           # in vocabulary order, not sorted
            rows = c[0].reshape(-1, c[0].shape[-1])
            assert not all(bool((row[:-1] >= row[1:]).all()) for row in rows)
            torch.testing.assert_close(r.sum(dim=-1), torch.ones(r.shape[:-1], dtype=F64), rtol=0, atol=1e-12)
        # temperature changes the size of the nucleus (so applying it after the filter is caught)
        for c in cases:
            if len(c) == 3 and c[2] in (0.5, 2.0):
                assert kept(ex.reference(*c)) != kept(ex.reference(c[0], c[1], 1.0)), c
        # the crossing token matters: the nucleus is larger than the tokens whose cumulative sum is <= p
        first = ex.reference(*cases[0])
        assert kept(first) == [2, 3]
        assert kept(ex.reference(*cases[1])) == [2] and cases[1][0].dim() == 1


def test_the_random_cases_are_clear_of_the_boundary():
    """Every cumulative sum is > 1e-6 away from top_p but in the one exact case, built to reach it."""
    ex = checks.EXERCISES["nucleus_probs"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        for i, c in enumerate(cases):
            logits, top_p, *rest = c
            clear = ch05.clear_of_the_boundary(logits, top_p, *rest)
            assert clear == (i != 2), (seed, i)
            flat = logits.reshape(-1, logits.shape[-1])
            t = rest[0] if rest else 1.0
            for row in flat:
                p = sorted((row / t).softmax(-1).tolist(), reverse=True)
                sums = [sum(p[:k + 1]) for k in range(len(p) - 1)]      # a whole row sums to 1
                assert i == 2 or all(abs(s - top_p) > 1e-6 for s in sums)


def test_the_dyadic_case_is_exact():
    logits, top_p, temperature = checks.cases_for(checks.EXERCISES["nucleus_probs"], 3)[2]
    probs = torch.softmax(logits / temperature, dim=-1)
    assert probs.tolist() == [0.125, 0.5, 0.125, 0.25] and top_p == 0.75
    assert ch05.nucleus_probs_reference(logits, top_p, temperature).tolist() == [0.0, 2 / 3, 0.0, 1 / 3]


def test_the_count_cases():
    ex = checks.EXERCISES["gpt_params"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        assert cases[0] == (50257, 1024, 12, 768, True)
        assert any(len(c) == 4 for c in cases)                                  # tie_weights by default
        ties = [c[4] if len(c) == 5 else True for c in cases]
        assert True in ties and False in ties
        assert any(c[2] == 1 for c in cases) and any(c[2] > 1 for c in cases)
        assert all(type(x) is int for c in cases for x in c[:4]) and all(type(t) is bool for t in ties)
        assert all(c[0] != c[1] for c in cases)


def eos_of(case):
    return case[5] if len(case) > 5 else None


def finish_steps(out: torch.Tensor, T: int, eos_id: int) -> list[int | None]:
    """The step at which each row first generated eos_id (None: never)."""
    return [row.index(eos_id) if eos_id in row else None for row in out[:, T:].tolist()]


def test_the_sampling_cases_are_built_to_expose_the_mistakes():
    ex = checks.EXERCISES["sample_tokens"]
    state = torch.get_rng_state()
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        built = [engine._clone(c) for c in cases]
        for (model, idx, n, temperature, generator, *eos), case in zip(built, cases):
            assert isinstance(model, GPT) and isinstance(generator, torch.Generator)
            assert all(p.dtype == torch.float32 for p in model.parameters())
            assert idx.dtype == torch.int64 and idx.dim() == 2 and type(n) is int and type(temperature) is float
            assert 0 <= int(idx.min()) and int(idx.max()) < model.config.vocab_size
            assert case[0]["config"]["block_size"] == model.config.block_size
            assert eos in ([], [None]) or (type(eos[0]) is int and 0 <= eos[0] < model.config.vocab_size)
        shapes = [(c[1].shape[0], c[1].shape[1], c[2], c[0]["config"]["block_size"]) for c in cases]
        assert {B for B, *_ in shapes} == {1, 3, 4}
        assert any(n == 0 for _, _, n, _ in shapes) and all(n > 0 for _, _, n, _ in shapes[:3])
        assert {0.5, 1.0, 2.0} <= {c[3] for c in cases}
        # cropping matters: some contexts outgrow the window (T + n - 1 > block_size), others never do
        assert sum(T + n - 1 > bs for _, T, n, bs in shapes) >= 4 and any(T + n - 1 <= bs for _, T, n, bs in shapes)
        assert len({bs for *_, bs in shapes}) == 2
        # the first case raises at once for the slips that raise: no crop, raw logits, dim 0, float tokens, no
        # argument eos_id (it is given, as None), eos_id used unguarded
        B, T, n, bs = shapes[0]
        assert B > 1 and T > 1 and n > 1 and T + n - 1 > bs and len(cases[0]) == 6 and cases[0][5] is None
        model, idx = built[0][:2]
        with torch.no_grad():
            first_logits = model(idx)[:, -1, :]
        assert bool((first_logits < 0).any(dim=-1).all())
        # eos_id is left to its default in cases 1-7
        assert [len(c) for c in cases[1:8]] == [5] * 7
        # two pairs of identical cases (the same model, prompt, generator seed and eos_id): 24 tokens at temperature
        # 2, and a pair with eos_id
        twins = [(i, j) for i in range(len(cases)) for j in range(i) if ch05._same_case(cases[i], cases[j])]
        assert twins == [(12, 11), (14, 13)]
        assert cases[11][1].shape[0] * cases[11][2] >= 24 and cases[11][3] == 2.0 and len(cases[11]) == 5
        assert eos_of(cases[13]) is not None
        # the logits are spread enough for temperature to matter
        assert float(first_logits.std()) > 1.0
    assert torch.equal(state, torch.get_rng_state())          # building the models drew nothing from it


def test_the_wide_case_is_changed_by_every_filter():
    """Case 7: a vocabulary of 128 with flatter logits, where top-k 50, top-p 0.99 and min-p 0.01 (written here as
    learners write them) each change a draw, each another one."""
    ex = checks.EXERCISES["sample_tokens"]
    for seed in SEEDS:
        case = checks.cases_for(ex, seed)[7]
        assert case[0]["config"]["vocab_size"] >= 100 and len(case) == 5
        outs = [ch05.sample_tokens_reference(*case)] + [
            learner_sampler(extra=extra)(*engine._clone(case)) for extra in ("top-k", "top-p", "min-p")]
        assert all(not torch.equal(a, b) for i, a in enumerate(outs) for b in outs[:i]), seed
        model = engine._clone(case)[0]
        with torch.no_grad():
            logits = model(case[1])[:, -1, :]
        assert 0.5 < float(logits.std()) < 2.5                     # fairly flat: no token dominates


def test_the_cases_with_eos_id_show_what_they_are_for():
    ex = checks.EXERCISES["sample_tokens"]
    for seed in SEEDS:
        cases = checks.cases_for(ex, seed)
        with_eos = [i for i, c in enumerate(cases) if eos_of(c) is not None]
        assert with_eos == [8, 9, 10, 13, 14]
        refs = {i: ch05.sample_tokens_reference(*cases[i]) for i in with_eos}
        greedy = {i: learner_sampler(pick="argmax", eos="ignore")(*engine._clone(cases[i])) for i in with_eos}
        for i in with_eos:
            T, eos_id = cases[i][1].shape[1], eos_of(cases[i])
            assert finish_steps(greedy[i], T, eos_id) == [None] * cases[i][1].shape[0]   # greedy never ends a row
            if i != 10:
                assert not bool((cases[i][1] == eos_id).any())                        # no eos_id in the prompt
        # 8: rows finish at different steps while another runs on; the output keeps its full length
        T, n = cases[8][1].shape[1], cases[8][2]
        steps = finish_steps(refs[8], T, eos_of(cases[8]))
        done = [s for s in steps if s is not None]
        assert refs[8].shape[1] == T + n and None in steps and len(set(done)) >= 2
        # 9: every row finishes, at different steps, early: the output is shorter
        T, n = cases[9][1].shape[1], cases[9][2]
        steps = finish_steps(refs[9], T, eos_of(cases[9]))
        assert None not in steps and len(set(steps)) >= 2 and refs[9].shape[1] < T + n - 1
        # 10: eos_id in the prompt of rows 0 (last position) and 1, not 2; rows 0 and 1 do not end at once, row 2
        # never; the output keeps its full length
        prompt, eos_id = cases[10][1], eos_of(cases[10])
        assert int(prompt[0, -1]) == eos_id and eos_id in prompt[1, :-1].tolist() and eos_id not in prompt[2].tolist()
        steps = finish_steps(refs[10], prompt.shape[1], eos_id)
        assert steps[0] != 0 and steps[1] != 0 and steps[2] is None
        assert refs[10].shape[1] == prompt.shape[1] + cases[10][2]
        # 13, 14: some row finishes early
        assert any(s is not None for s in finish_steps(refs[13], cases[13][1].shape[1], eos_of(cases[13])))


# --------------------------------------------------------------------------- the grader's honesty flags


@pytest.mark.parametrize("name", ALL)
def test_honest_solutions_are_not_flagged(name):
    rec, verdict = exercise_suite.harvest(name, solution(name))
    assert rec["flags"] == [] and rec["tampering"] == [], rec["flags"]
    assert verdict.status == checks.PASS, verdict.message


LIBRARY_ANSWERS = [
    ("nucleus_probs", """
        from tinyformer.sampling import next_token_distribution as dist

        def nucleus_probs(logits, top_p, temperature=1.0):
            return dist(logits, temperature, top_p=top_p)
        """, "tinyformer.sampling.next_token_distribution"),
    ("nucleus_probs", """
        import torch
        from tinyformer import sampling

        def nucleus_probs(logits, top_p, temperature=1.0):
            return torch.softmax(sampling.top_p_filter(logits / temperature, top_p), dim=-1)
        """, "tinyformer.sampling.top_p_filter"),
    ("gpt_params", """
        import torch
        from tinyformer.model import GPT, GPTConfig

        def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
            config = GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=1,
                               d_model=d_model, tie_weights=tie_weights)
            with torch.device("meta"):
                model = GPT(config)
            return sum(p.numel() for p in model.parameters())
        """, "tinyformer.model.GPT.__init__"),
    ("gpt_params", """
        from tinyformer.blocks import block_param_count

        def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
            d = d_model
            head = 0 if tie_weights else vocab_size * d
            return (vocab_size + block_size) * d + n_layer * block_param_count(d) + 2 * d + head
        """, "tinyformer.blocks.block_param_count"),
    ("gpt_params", """
        import torch

        def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
            d = d_model
            block = torch.nn.TransformerEncoderLayer(d, 1, 4 * d)   # the same parameters as a GPT block
            n_block = sum(p.numel() for p in block.parameters())
            head = 0 if tie_weights else vocab_size * d
            return (vocab_size + block_size) * d + n_layer * n_block + 2 * d + head
        """, "torch.nn.TransformerEncoderLayer.__init__"),
    ("sample_tokens", """
        from tinyformer.sampling import generate as decode

        def sample_tokens(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
            return decode(model, idx, max_new_tokens, temperature=temperature, generator=generator, eos_id=eos_id)
        """, "tinyformer.sampling.generate"),
    ("sample_tokens", """
        import torch
        from tinyformer import sampling

        def sample_tokens(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
            done = torch.zeros(idx.shape[0], 1, dtype=torch.bool)
            for _ in range(max_new_tokens):
                logits = model(idx[:, -model.config.block_size:])[:, -1, :]
                new = sampling.sample_next(logits, temperature, generator=generator)
                if eos_id is not None:
                    new = new.masked_fill(done, eos_id)
                    done = done | (new == eos_id)
                idx = torch.cat((idx, new), dim=1)
                if eos_id is not None and done.all():
                    break
            return idx
        """, "tinyformer.sampling.sample_next"),
    ("sample_tokens", """
        import torch
        from tinyformer.sampling import next_token_distribution

        def sample_tokens(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
            done = torch.zeros(idx.shape[0], 1, dtype=torch.bool)
            for _ in range(max_new_tokens):
                logits = model(idx[:, -model.config.block_size:])[:, -1, :]
                probs = next_token_distribution(logits, temperature)
                new = torch.multinomial(probs, 1, generator=generator)
                if eos_id is not None:
                    new = torch.where(done, eos_id, new)
                    done = done | (new == eos_id)
                idx = torch.cat((idx, new), dim=1)
                if eos_id is not None and done.all():
                    break
            return idx
        """, "tinyformer.sampling.next_token_distribution"),
    ("gpt_params", """
        import torch

        def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
            d = d_model
            with torch.device("meta"):   # one block's layers, torch's own, counted
                layers = [torch.nn.MultiheadAttention(d, 1), torch.nn.Linear(d, 4 * d),
                          torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)]
            n_block = sum(p.numel() for layer in layers for p in layer.parameters())
            head = 0 if tie_weights else vocab_size * d
            return (vocab_size + block_size) * d + n_layer * n_block + 2 * d + head
        """, "torch.nn.MultiheadAttention.__init__"),
    ("gpt_params", """
        from tinyformer.attention import MultiHeadAttention
        from tinyformer.blocks import FeedForward, LayerNorm

        def gpt_params(vocab_size, block_size, n_layer, d_model, tie_weights=True):
            d = d_model
            layers = [MultiHeadAttention(d, 1), FeedForward(d), LayerNorm(d), LayerNorm(d)]
            n_block = sum(p.numel() for layer in layers for p in layer.parameters())
            head = 0 if tie_weights else vocab_size * d
            return (vocab_size + block_size) * d + n_layer * n_block + 2 * d + head
        """, "tinyformer.blocks.FeedForward.__init__"),
    ("cycle_weights", """
        from tinyformer.course.ch05 import cycle_weights_reference as cycle_weights
        """, "tinyformer.course.ch05.cycle_weights_reference"),
    ("cycle_weights", """
        import torch
        import torch.nn.functional as F

        def cycle_weights(n):
            gen = torch.Generator().manual_seed(0)
            E = torch.randn(n, 2, generator=gen, requires_grad=True)
            W_U = torch.randn(2, n, generator=gen, requires_grad=True)
            opt = torch.optim.Adam([E, W_U], lr=0.1)
            tokens = torch.arange(n)
            for _ in range(400):
                loss = F.cross_entropy(E[tokens] @ W_U, (tokens + 1) % n)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return E.detach(), W_U.detach()
        """, "torch.optim.Adam.step"),
]


@pytest.mark.parametrize("k", range(len(LIBRARY_ANSWERS)), ids=[f"{n}-{c}" for n, _, c in LIBRARY_ANSWERS])
def test_the_library_answer_is_flagged(k):
    name, source, caught = LIBRARY_ANSWERS[k]
    fn = define(textwrap.dedent(source), checks.EXERCISES[name].function)
    rec, verdict = exercise_suite.harvest(name, fn)
    assert caught in rec["flags"], rec["flags"]
    if verdict.passed:          # the in-book check names the call too
        exercise_suite.in_book_refuses(name, fn, rec["flags"])
    assert verdict.status == checks.PASS          # its outputs are right: the flag alone takes the credit


def test_the_library_greedy_is_flagged_and_named():
    """tinyformer.sampling.greedy is a wrong answer (no sampling) that calls the library: flagged, and told (it
    ignores eos_id, which its argmax never generates in the cases: see _greedy_avoids_eos)."""
    source = """
        from tinyformer.sampling import greedy

        def sample_tokens(model, idx, max_new_tokens, temperature=1.0, generator=None, eos_id=None):
            return greedy(model, idx, max_new_tokens)
        """
    rec, verdict = exercise_suite.harvest("sample_tokens", define(textwrap.dedent(source), "sample_tokens"))
    assert "tinyformer.sampling.greedy" in rec["flags"], rec["flags"]
    assert verdict.status == checks.FAIL and "you took the most likely token (greedy decoding)" in verdict.message


# --------------------------------------------------------------------------- the grader, end to end


def test_the_grader_judges_chapter_five_in_its_sandbox(tmp_path):
    """The models and generators of 5.6 are built in the sandbox from the seeds the cases carry."""
    ascending = SOLUTIONS["nucleus_probs"].replace("key=lambda i: -p[i]", "key=lambda i: p[i]")
    assert ascending != SOLUTIONS["nucleus_probs"]
    tied = SOLUTIONS["cycle_weights"].replace("return E, 10 * n * W_U", "return E, 10 * n * E.T")
    assert tied != SOLUTIONS["cycle_weights"]
    rows = SUITE.graded(tmp_path, {"nucleus_probs": ascending, "gpt_params": SOLUTIONS["gpt_params"],
                                   "sample_tokens": SOLUTIONS["sample_tokens"], "cycle_weights": tied})
    assert list(rows) == CHAPTER
    assert rows["nucleus_probs"][0] == checks.FAIL and "LEAST likely tokens" in rows["nucleus_probs"][1], rows
    assert rows["gpt_params"][0] == checks.PASS, rows
    assert rows["sample_tokens"][0] == checks.PASS, rows
    assert rows["cycle_weights"][0] == checks.FAIL and ch05.CYCLE_TIED in rows["cycle_weights"][1], rows


def test_the_grader_tells_a_loop_that_ignores_the_generator(tmp_path):
    """In the sandbox's kernel too, the twin cases tell a loop that draws from the global generator."""
    unseeded = SOLUTIONS["sample_tokens"].replace(", generator=generator)", ")")
    assert unseeded != SOLUTIONS["sample_tokens"]
    rows = SUITE.graded(tmp_path, {"sample_tokens": unseeded})
    assert rows["sample_tokens"][0] == checks.FAIL and ch05.SAMPLE_GENERATOR in rows["sample_tokens"][1], rows


# --------------------------------------------------------------------------- the references


def brute_force_nucleus(row: list[float], top_p: float, temperature: float) -> list[float]:
    """One row, in Python floats: the fewest most likely tokens (lowest index first among equals) whose
    probability reaches top_p, renormalised; zero elsewhere."""
    z = [v / temperature for v in row]
    e = [math.exp(v - max(z)) for v in z]
    p = [v / sum(e) for v in e]
    ranked = sorted(range(len(p)), key=lambda i: (-p[i], i))
    for size in range(1, len(p) + 1):
        if math.fsum(p[i] for i in ranked[:size]) >= top_p - 1e-12 or size == len(p):
            break
    inside = set(ranked[:size])
    total = math.fsum(p[i] for i in inside)
    return [p[i] / total if i in inside else 0.0 for i in range(len(p))]


def test_nucleus_reference_is_the_brute_force_nucleus():
    ex = checks.EXERCISES["nucleus_probs"]
    for seed in SEEDS:
        for case in checks.cases_for(ex, seed):
            logits, top_p, *rest = case
            temperature = rest[0] if rest else 1.0
            ref = ch05.nucleus_probs_reference(*case)
            assert ref.dtype == F64 and ref.shape == logits.shape
            rows = logits.reshape(-1, logits.shape[-1]).tolist()
            expected = torch.tensor([brute_force_nucleus(r, top_p, temperature) for r in rows], dtype=F64)
            torch.testing.assert_close(ref.reshape(expected.shape), expected, rtol=1e-12, atol=1e-14)


def test_nucleus_reference_handles_any_leading_axes():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 7, generator=g, dtype=F64)
    ref = ch05.nucleus_probs_reference(x, 0.8, 1.3)
    assert torch.equal(ref.reshape(-1, 7), ch05.nucleus_probs_reference(x.reshape(-1, 7), 0.8, 1.3))
    assert torch.equal(ref[1, 2, 3], ch05.nucleus_probs_reference(x[1, 2, 3], 0.8, 1.3))


def test_nucleus_reference_at_the_edges():
    x = torch.tensor([[2.0, 0.5, -1.0, 1.0]], dtype=F64)
    torch.testing.assert_close(ch05.nucleus_probs_reference(x, 1.0), torch.softmax(x, dim=-1))
    assert kept(ch05.nucleus_probs_reference(x, 1e-9)) == [1]
    assert ch05.nucleus_probs_reference(x, 1e-9)[0, 0] == 1.0


@pytest.mark.parametrize("config", [
    dict(vocab_size=65, block_size=32, n_layer=4, d_model=48, tie_weights=False),
    dict(vocab_size=65, block_size=32, n_layer=4, d_model=48, tie_weights=True),
    dict(vocab_size=10, block_size=8, n_layer=1, d_model=4, tie_weights=True),
    dict(vocab_size=300, block_size=20, n_layer=3, d_model=24, tie_weights=False),
])
def test_count_reference_is_what_the_model_holds(config):
    model = GPT(GPTConfig(n_head=1, **config))
    unique = {id(p): p for p in model.parameters()}
    expected = sum(p.numel() for p in unique.values())
    assert ch05.gpt_params_reference(**config) == expected == solution("gpt_params")(**config)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_count_reference_is_gpt2_small_on_the_meta_device(tie_weights):
    with torch.device("meta"):
        model = GPT(GPTConfig.gpt2(tie_weights=tie_weights))
    expected = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    got = ch05.gpt_params_reference(50257, 1024, 12, 768, tie_weights)
    assert got == expected == GPT2_SMALL + (0 if tie_weights else 50257 * 768)
    assert type(got) is int


# --------------------------------------------------------------------------- 5.6's reference


def hand_loop(model, idx, max_new_tokens, temperature, generator, eos_id=None):
    """The loop the exercise describes, one row at a time in Python where it can be: a row whose last new token
    is eos_id has ended and gets eos_id again (after its draw), and the loop stops once every row has ended."""
    T = idx.shape[1]
    rows = [list(map(int, row)) for row in idx]
    block_size = model.config.block_size
    with torch.no_grad():
        for _ in range(max_new_tokens):
            context = torch.tensor([row[-block_size:] for row in rows])
            probs = F.softmax(model(context)[:, -1, :] / temperature, dim=-1)
            for row, token in zip(rows, torch.multinomial(probs, 1, generator=generator).tolist()):
                ended = eos_id is not None and len(row) > T and row[-1] == eos_id
                row.append(eos_id if ended else token[0])
            if eos_id is not None and all(row[-1] == eos_id for row in rows):
                break
    return torch.tensor(rows, dtype=torch.int64)


def test_the_sampling_reference_is_the_hand_loop_and_draws_as_much():
    """The same tokens from the same seed, and the generators end in the same state (as many draws)."""
    ex = checks.EXERCISES["sample_tokens"]
    for seed in SEEDS:
        for case in checks.cases_for(ex, seed):
            model, idx, n, temperature, generator, *eos = engine._clone(case)
            mine = engine._clone(case)[4]
            ref = ch05.sample_tokens_reference(model, idx, n, temperature, generator, *eos)
            expected = hand_loop(model, idx, n, temperature, mine, *eos)
            steps = ref.shape[1] - idx.shape[1]
            assert ref.dtype == torch.int64 and ref.shape[0] == idx.shape[0] and 0 <= steps <= n
            assert steps == n or (eos[0] is not None and bool((ref[:, -1] == eos[0]).all()))
            assert torch.equal(ref, expected) and torch.equal(ref[:, :idx.shape[1]], idx)
            assert torch.equal(generator.get_state(), mine.get_state())


def test_generate_draws_one_multinomial_per_step_on_the_float32_batch(monkeypatch):
    """What the exercise tells the reader to do is what the library does: one torch.multinomial(probs, 1,
    generator=generator) per step, on the (B, V) float32 probabilities softmax(logits / temperature), for every
    row, the finished ones too."""
    calls = []
    real = torch.multinomial

    def spy(probs, num_samples, *args, **kwargs):
        calls.append((tuple(probs.shape), probs.dtype, num_samples, args, kwargs.get("generator")))
        return real(probs, num_samples, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", spy)
    for case in checks.cases_for(checks.EXERCISES["sample_tokens"], 0):
        model, idx, n, temperature, generator, *eos = engine._clone(case)
        calls.clear()
        steps = ch05.sample_tokens_reference(model, idx, n, temperature, generator, *eos).shape[1] - idx.shape[1]
        V = model.config.vocab_size
        assert calls == [((idx.shape[0], V), torch.float32, 1, (), generator)] * steps


def test_the_sampling_reference_takes_a_case_as_stored():
    case = checks.cases_for(checks.EXERCISES["sample_tokens"], 1)[0]
    assert torch.equal(ch05.sample_tokens_reference(*case), ch05.sample_tokens_reference(*engine._clone(case)))


def test_a_check_of_the_loop_leaves_the_global_random_state_alone(capsys):
    state = torch.get_rng_state()
    assert checks.check_sample_tokens(solution("sample_tokens"))
    assert not checks.check_sample_tokens(learner_sampler(pick="argmax"))
    capsys.readouterr()
    assert torch.equal(state, torch.get_rng_state())


def test_multinomial_of_one_sample_is_an_argmax_over_exponential_draws():
    """Why the learners' variants in test_other_right_loops_pass draw the reference's tokens: in this torch,
    torch.multinomial(probs, 1, generator=g) is argmax(probs / E), E one Exp(1) draw per entry of (B, V), in
    order, whatever the dtype or the scale of probs. If torch changes this, the exercise's wording ("one
    torch.multinomial(probs, 1, generator=generator) per step") still matches generate; those variants may not."""
    for seed in range(20):
        probs = torch.softmax(2 * torch.randn(3, 11, generator=torch.Generator().manual_seed(100 + seed)), dim=-1)
        g, h = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        drawn = torch.multinomial(probs, 1, generator=g)
        exp = torch.empty(3, 11).exponential_(1, generator=h)
        assert torch.equal(drawn, (probs / exp).argmax(dim=-1, keepdim=True))
        assert torch.equal(g.get_state(), h.get_state())
