"""The book's notation: one table, read by the appendix page and by the test that holds the chapters to it.

Each :class:`Symbol` row gives a symbol as the chapters write it in LaTeX, what it means, its shape,
its name in the library's code and the chapter that introduces it. ``tools/notation.py`` writes the
appendix page (``book/appendix-notation.md``) from :data:`TABLE`; ``tests/test_notation.py`` reads
the math of every chapter and fails when

- a chapter writes a symbol of a :data:`GOVERNED` family (a subscripted ``W``, ``d``, ``n``, ``N``,
  ``D``, ``T`` or ``\\alpha``: the weight matrices, widths, counts and exponents) that no row names;
- a row's symbol is absent from the chapter the row says introduces it, or (for a symbol with one
  meaning in the table) an earlier chapter already uses it.

Letters without a subscript (``A``, ``B``, ``L``, ``s`` …) carry different meanings in different
chapters, as in any book; the table lists the meanings that last beyond one section, and each
chapter defines its local letters where it uses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The families of symbols the table must cover completely: any subscripted symbol with one of
#: these bases that a chapter writes in math needs a row.
GOVERNED = ("W", "d", "n", "N", "D", "T", "\\alpha")


@dataclass(frozen=True)
class Symbol:
    latex: str       # as the chapters write it, e.g. "W_Q" or "d_\\text{model}"
    meaning: str     # Markdown, one phrase
    shape: str = ""  # Markdown math or "" for a scalar
    code: str = ""   # the name in tinyformer's code ("" when the code has none)
    chapter: int = 0
    also: tuple[str, ...] = ()  # other spellings of the same symbol, as the chapters write them
    previewed: tuple[int, ...] = ()  # earlier chapters that use it ahead (an exercise, a forward reference)


TABLE: tuple[Symbol, ...] = (
    # Chapter 1: embeddings
    Symbol("C_{co}", "how often context word $o$ occurs near centre word $c$ (the co-occurrence counts)",
           r"$(\lvert\mathcal{V}\rvert, \lvert\mathcal{V}\rvert)$", "", 1, also=("C",)),
    Symbol("U_d S_d W_d^\\top", "the truncated SVD of a matrix $M$: its $d$ largest singular values $S_d$ and "
           "their singular vectors", r"$(\lvert\mathcal{V}\rvert, d)$, $(d, d)$, $(\lvert\mathcal{V}\rvert, d)$",
           "", 1, also=("W_d", "U_d", "S_d")),
    Symbol("v_c", "a centre word's vector in skip-gram (a row of the input embedding)", "$(d)$", "SkipGram.W_in", 1),
    Symbol("u_o", "a context word's vector in skip-gram (a row of the output embedding)", "$(d)$",
           "SkipGram.W_out", 1),
    Symbol("n_1, \\dots, n_k", "the $k$ noise words drawn for one true pair (negative sampling)", "", "", 1,
           also=("n_1", "n_k")),
    # Chapter 2: attention
    Symbol("B", "batch size: sequences processed together", "", "B", 2),
    Symbol("T", "sequence length, the tokens in the context; positions are counted from 0", "", "T", 2),
    Symbol("T_q, T_k", "number of queries and of keys, when they differ (a cache, cross-attention)", "", "", 2,
           also=("T_q", "T_k")),
    Symbol("\\mathcal{V}", r"the vocabulary; its size is $\lvert\mathcal{V}\rvert$", "", "vocab_size", 2),
    Symbol("d_\\text{model}", "width of the vectors that flow through the model", "", "d_model", 2),
    Symbol("X, x_i", "the input of a layer, one row $x_i$ per token", r"$(B, T, d_\text{model})$", "x", 2),
    Symbol("W_Q, W_K", "query and key projections (`nn.Linear` stores their transposes)",
           r"$(d_\text{model}, d_k)$", "q_proj, k_proj", 2, also=("W_Q", "W_K")),
    Symbol("W_V", "value projection", r"$(d_\text{model}, d_v)$", "v_proj", 2),
    Symbol("d_k, d_v", "width of a query or key, and of a value", "", "d_k, d_v", 2, also=("d_k", "d_v")),
    Symbol("Q, K, V", "queries $XW_Q$, keys $XW_K$, values $XW_V$", "$(B, T, d_k)$, $(B, T, d_k)$, $(B, T, d_v)$",
           "q, k, v", 2),
    Symbol("S_{ij}, s_j", "score of query $i$ against key $j$ (for one query, $s_j$)", "$(B, T, T)$", "scores", 2),
    Symbol("\\alpha_{ij}", "attention weights: how much query $i$ takes from key $j$; each row sums to 1",
           r"$(B, T, T)$ or $(B, n_\text{heads}, T, T)$", "weights", 2, also=("\\alpha_j", "\\alpha_l")),
    Symbol("n_\\text{heads}", "number of attention heads (`n_head` in `GPTConfig`)", "", "n_heads", 2),
    Symbol("d_\\text{head}", r"width of one head, $d_\text{model} / n_\text{heads}$", "", "d_head", 2),
    Symbol("W_O, W_O^{(h)}", "output projection, and its block of rows that belongs to head $h$",
           r"$(d_\text{model}, d_\text{model})$, $(d_\text{head}, d_\text{model})$", "o_proj", 2,
           also=("W_O",)),
    Symbol("W_Q^{(h)}, W_K^{(h)}, W_V^{(h)}", "head $h$'s columns of the projections",
           r"$(d_\text{model}, d_\text{head})$", "", 2),
    Symbol("y_i", "the output of attention at position $i$: the weighted sum of the values", "$(d_v)$", "out", 2),
    Symbol("\\text{head}_h", "the output of head $h$, before the heads are concatenated",
           r"$(B, T, d_\text{head})$", "", 2),
    Symbol("w, W_1, W_2", "the additive (Bahdanau) score's weights, $s_j = w^\\top \\tanh(q W_1 + k_j W_2)$ "
           "(a detour; from Chapter 3 on, $W_1, W_2$ are the feed-forward network's)", "", "", 2,
           also=("W_1", "W_2")),
    Symbol("e_i", "the one-hot vector of token $i$: all zeros but a 1 at position $i$", "$(V)$", "", 1),
    Symbol("\\ell", "the index of a layer; in Chapter 1's skip-gram equations, also the loss of one pair", "", "",
           1),
    # Chapter 3: the block
    Symbol("x_\\ell", r"the residual stream after block $\ell$ ($x_0$ the embeddings)", r"$(B, T, d_\text{model})$",
           "", 3),    Symbol("W_1, W_2", "the two weight matrices of the feed-forward network",
           r"$(d_\text{model}, d_\text{ff})$, $(d_\text{ff}, d_\text{model})$", "up_proj, down_proj", 3,
           also=("W_1", "W_2")),
    Symbol("d_\\text{ff}", "width of the feed-forward network's hidden layer", "", "d_ff", 3, previewed=(2,)),
    Symbol("L", "number of blocks (layers)", "", "n_layer", 3, also=("n_\\text{layer}",)),
    Symbol("\\gamma, \\beta", "layer norm's gain and bias", r"$(d_\text{model})$", "weight, bias", 3),
    Symbol("\\epsilon", "the small constant inside layer norm's square root", "", "eps", 3),
    # Chapter 4: positions
    Symbol("\\mathrm{PE}", "the sinusoidal position table", r"$(T, d_\text{model})$", "sinusoidal_positions", 4),
    Symbol("\\theta_i", "the angular frequency of dimension pair $i$, $10000^{-2i/d}$: the sinusoidal table's "
           "and rotary embedding's", "", "", 4),
    Symbol("\\theta, R(\\theta)", "an angle, and the $2 \\times 2$ matrix that rotates a pair of coordinates by it",
           "$(2, 2)$", "", 4),
    Symbol("W_x, W_p", "a layer's weight split into the part that reads the token and the part that reads "
           "the position", "", "", 4, also=("W_x", "W_p")),
    Symbol("z_t", r"a pair of coordinates read as one complex number, $z_t = e^{\mathrm{i} t \theta_i}$", "", "",
           4),
    # Chapter 5: the GPT
    Symbol("V", r"the vocabulary's size $\lvert\mathcal{V}\rvert$, in Chapter 1 and from Chapter 5 on; inside "
           r"attention (Chapters 2 to 4, and 8) $V$ holds the values, and in Chapter 3's SwiGLU box it is the "
           "second input matrix", "", "vocab_size", 1),
    Symbol("E", "the embedding matrix, one row per token (Chapter 1 writes its width $d$)",
           r"$(V, d_\text{model})$", "token_embedding", 1),
    Symbol("W_U", r"unembedding, the LM head ($W_U = E^\top$ when the weights are tied)",
           r"$(d_\text{model}, V)$", "lm_head", 5),
    Symbol("h_t, z_t", r"the last block's vector at position $t$ after the final norm, and its logits "
           r"$z_t = h_t W_U$", r"$(d_\text{model})$, $(V)$", "logits", 5),
    Symbol("\\tau", "sampling temperature: the logits are divided by it", "", "temperature", 5),
    Symbol("T_\\text{max}", "the context window: the longest sequence the model takes", "", "block_size", 5),
    Symbol("N_\\text{matmul}", "the weights that multiply activations (a step costs about $6N_\\text{matmul}$ "
           "FLOPs per token, plus attention)", "", "", 5),
    Symbol("N_p", "the nucleus: the smallest set of likeliest tokens whose probability reaches $p$ (top-p "
           "sampling)", "", "", 5),
    Symbol("\\mathcal{L}", "a loss: the average negative log-likelihood of the targets", "", "loss", 5),
    # Chapter 6: training
    Symbol("\\theta", "all the parameters of a model, as one vector", "", "model.parameters()", 6),
    Symbol("\\beta_1, \\beta_2", "Adam's decay rates for the running mean of the gradient and of its square", "",
           "betas", 6, also=("\\beta_1", "\\beta_2"), previewed=(4,)),
    Symbol("\\lambda", "the weight decay", "", "weight_decay", 6),
    # Chapter 7: scaling
    Symbol("N, D, C", "parameters, training tokens, and compute in FLOPs ($C \\approx 6ND$); Chapter 5 "
           "already writes $N$ for the parameters", "", "n_params, n_tokens", 7),
    Symbol("L", "in the scaling laws, the loss a model reaches", "", "", 7),
    Symbol("E, A, B, \\alpha, \\beta", r"the constants of the Chinchilla law $L = E + A/N^\alpha + B/D^\beta$ "
           "(local to Chapter 7: elsewhere these letters mean other things)", "", "", 7),
    Symbol("\\alpha_N, \\alpha_D, \\alpha_C", "the exponents of the power laws in $N$, $D$ and $C$", "",
           "alpha", 7, also=("\\alpha_N", "\\alpha_D", "\\alpha_C")),
    Symbol("N_c, D_c, C_c", "the scales of the power laws $L = (N_c/N)^{\\alpha_N}$ …", "", "", 7,
           also=("N_c", "D_c")),
    Symbol("N_\\text{opt}, D_\\text{opt}", "the compute-optimal model size and token count for a budget $C$", "",
           "", 7, also=("N_\\text{opt}", "D_\\text{opt}")),
    # Chapter 8: the KV cache
    Symbol("n_\\text{kv heads}", "number of key/value heads in grouped-query attention (`n_kv_head` in "
           "`GPTConfig`)", "", "n_kv_heads", 8),
    # Chapter 9: LoRA
    Symbol("W_0", "a frozen pretrained weight (`nn.Linear` stores its transpose)", r"$(d_\text{in}, d_\text{out})$",
           "LoRALinear.base.weight", 9),
    Symbol("d_\\text{in}, d_\\text{out}", "input and output widths of a linear layer", "",
           "in_features, out_features", 9, also=("d_\\text{in}", "d_\\text{out}")),
    Symbol("A, B, r", "LoRA's factors and their rank: $\\Delta W = AB$", r"$(d_\text{in}, r)$, $(r, d_\text{out})$",
           "A, B, r", 9),
    Symbol("\\alpha", r"LoRA's scale: the update is multiplied by $\alpha / r$", "", "alpha", 9),
    # Chapter 10: interpretability
    Symbol("z_h", "head $h$'s output before the output projection (TransformerLens's `hook_z`)",
           r"$(B, T, d_\text{head})$", "attn.hook_z", 10),
)


# --------------------------------------------------------------------------------------------
# Reading the symbols out of a chapter's math
# --------------------------------------------------------------------------------------------

_GROUP = r"\{(?:[^{}]|\{[^{}]*\})*\}"
_ATOM = rf"(?:\\(?:text|mathrm|operatorname|mathcal|mathbf)\s*{_GROUP}|\\[A-Za-z]+|[A-Za-z0-9])"
_SYMBOL = re.compile(rf"(?<![A-Za-z\\])(\\mathcal\{{[A-Z]\}}|\\[A-Za-z]+|[A-Za-z])"
                     rf"(?:_({_GROUP}|{_ATOM}))?(?:\^({_GROUP}|{_ATOM}))?")
# inline math may wrap onto the next line (not across a blank line)
_MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$((?:[^$\n]|\n(?!\s*\n))+?)\$|```\{math\}(.*?)```", re.S)
_WORDS = re.compile(r"\\(?:text|mathrm|operatorname|texttt)\s*\{([^{}]*)\}")


def _plain(text: str | None) -> str:
    """A subscript without its markup: ``{\\text{model}}`` and ``\\mathrm{model}`` are ``model``."""
    text = _WORDS.sub(r"\1", text or "").strip()
    while text.startswith("{") and text.endswith("}"):
        text = _WORDS.sub(r"\1", text[1:-1]).strip()
    return re.sub(r"\s+", "", text.replace("\\_", "_"))


def key(base: str, subscript: str | None) -> str:
    """The name under which a symbol is compared: its base and its plain subscript (``d_model``)."""
    sub = _plain(subscript)
    return f"{base}_{sub}" if sub else base


def math_spans(markdown: str) -> list[str]:
    """The LaTeX of every inline (``$…$``), display (``$$…$$``) and ``{math}`` block of ``markdown``."""
    return [next(g for g in m.groups() if g is not None) for m in _MATH.finditer(markdown)]


def symbols_in(latex: str) -> list[str]:
    """The keys of the symbols written in ``latex`` (words in ``\\text{…}`` blanked first by
    :func:`_strip_words`, which :func:`chapter_symbols` does)."""
    found = []
    for m in _SYMBOL.finditer(latex):
        base = m.group(1)
        if base in ("\\text", "\\mathrm", "\\operatorname", "\\texttt", "\\mathbf"):
            continue
        found.append(key(base, m.group(2)))
    return found


_DECORATED = re.compile(r"\\(?:hat|widehat|bar|overline|tilde|widetilde|vec|bm|mathbf|boldsymbol|mathrm|mathit|"
                        r"mathsf|text)\s*\{\s*([A-Za-z])\s*\}|"
                        r"(?<![_^\\A-Za-z])\{\s*([A-Za-z])\s*\}")
# a weight matrix named by a superscript (W^Q), and a word as an italic subscript (d_{model})
_SUPERSCRIPT_ROLE = re.compile(r"(?<![A-Za-z\\])W\^\{?[QKVOUqkvou]\}?(?![A-Za-z])")
_ITALIC_WORD = re.compile(r"(?<![A-Za-z\\])(?:W|d|n|N|D|T)_\{\s*([A-Za-z]{2,})\s*\}")


def _undecorate(latex: str) -> str:
    """``\\hat{W}_G``, ``\\mathbf{W}_Q`` and ``{W}_G`` read as the letter they decorate."""
    return _DECORATED.sub(lambda m: m.group(1) or m.group(2), latex)


def style_problems(markdown: str) -> list[str]:
    """Spellings of a governed symbol that the table's keys would hide: ``W^Q`` for ``W_Q``, and a
    word set as an italic subscript, ``d_{model}`` for ``d_\\text{model}``."""
    out = []
    for span in math_spans(markdown):
        out += [f"writes ${m.group(0)}$: the book names a projection by its subscript ($W_Q$)"
                for m in _SUPERSCRIPT_ROLE.finditer(span)]
        out += [f"writes ${m.group(0)}$: a word in a subscript is upright, \\text{{{m.group(1)}}}"
                for m in _ITALIC_WORD.finditer(span)]
    return out


def _strip_words(latex: str) -> str:
    """``latex`` with every ``\\text{…}``-like group that is not a subscript or superscript blanked."""
    return re.sub(r"(?<![_^])(?<![_^]\{)\\(?:text|mathrm|operatorname|texttt)\s*" + _GROUP, " ", latex)


def chapter_symbols(markdown: str) -> set[str]:
    """The keys of every symbol in the math of one chapter's Markdown."""
    out: set[str] = set()
    for span in math_spans(markdown):
        out.update(symbols_in(_strip_words(_undecorate(span))))
    return out


def governed(symbol_key: str) -> bool:
    """Whether the table must name this symbol: a subscripted symbol of a :data:`GOVERNED` family."""
    base, _, sub = symbol_key.partition("_")
    return bool(sub) and base in GOVERNED


def row_keys(row: Symbol) -> set[str]:
    """The keys a row stands for: the symbols of its LaTeX and of its other spellings."""
    keys = set()
    for latex in (row.latex, *row.also):
        keys.update(symbols_in(_strip_words(latex)))
    return keys


def table_keys(table=TABLE) -> set[str]:
    """Every key some row of ``table`` names."""
    return set().union(*(row_keys(row) for row in table))


def unknown_symbols(chapter_markdown: str, table=TABLE) -> set[str]:
    """The governed symbols of a chapter's Markdown that no row of ``table`` names."""
    return {k for k in chapter_symbols(chapter_markdown) if governed(k)} - table_keys(table)


# --------------------------------------------------------------------------------------------
# The appendix page
# --------------------------------------------------------------------------------------------

INTRO = """\
The book writes vectors as **rows** and multiplies them on the left of a weight matrix, $xW$, as
PyTorch does (`x @ W`; `nn.Linear` computes $xW^\\top + b$ with its weight stored transposed).
Some textbooks use column vectors and write $W^\\top x$; the two describe the same computation.
Shapes list the batch dimensions first, as tensors do: $(B, T, d_\\text{model})$.

This page is generated from one table, `tinyformer.course.notation.TABLE`, by `tools/notation.py`.
The same table is read by a test that fails when a chapter writes a weight matrix, a width, a
count or an exponent ($W_\\ast$, $d_\\ast$, $n_\\ast$, $N_\\ast$, $D_\\ast$, $T_\\ast$,
$\\alpha_\\ast$) that the table lacks, or when a symbol is not introduced where the table says.
Letters without a subscript ($A$, $B$, $L$, $s$, …) mean different things in different chapters,
as in most books; the table lists the meanings that last beyond one section, and each chapter
defines its local letters where it uses them.

## Conventions and operators

| written | means |
| --- | --- |
| $x_i$, $E_{i,:}$, $\\mathrm{PE}[t, 2i]$ | entry or row $i$ (a matrix's rows are tokens); positions count from 0 |
| $x_{\\le t}$, $x_{<t}$ | the tokens up to and including position $t$, and those before it |
| $W^{(h)}$, $x^{(\\ell)}$ | the part that belongs to head $h$, or the value at layer $\\ell$ |
| $A^\\top$ | the transpose of $A$ |
| $u \\cdot v$, $\\lVert v \\rVert$ | the dot product, and the Euclidean length $\\sqrt{v \\cdot v}$ |
| $A \\odot B$ | elementwise product |
| $\\operatorname{softmax}$ | $\\exp$ of each entry divided by the sum over the last axis (the keys, the vocabulary) |
| $\\ln$, $\\log$ | both the natural logarithm; losses are in nats |
| $\\mathbb{E}$, $\\operatorname{Var}$ | mean and variance (layer norm's variance divides by the count: it is biased) |
| $\\propto$, $\\approx$ | proportional to, approximately equal to |
"""

CHAPTERS = {
    1: "01-embeddings", 2: "02-attention", 3: "03-transformer-block", 4: "04-positions", 5: "05-gpt",
    6: "06-training", 7: "07-scaling", 8: "08-kv-cache", 9: "09-lora", 10: "10-interp",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page(table=TABLE, titles: dict[int, str] | None = None) -> str:
    """The Markdown of ``book/appendix-notation.md``: one table per chapter, in the order the
    chapters introduce the symbols. ``titles`` maps a chapter's number to its title."""
    lines = ["# Notation", "", INTRO]
    for number in sorted({row.chapter for row in table}):
        title = (titles or {}).get(number, f"Chapter {number}")
        lines += ["", f"## {title}", "", f"Introduced in {{doc}}`Chapter {number} <{CHAPTERS[number]}>`:", "",
                  "| symbol | meaning (shape) | in code |", "| --- | --- | --- |"]
        for row in (r for r in table if r.chapter == number):
            code = ", ".join(f"`{name.strip()}`" for name in row.code.split(",")) if row.code else ""
            meaning = f"{row.meaning}; shape {row.shape}" if row.shape else row.meaning
            lines.append(f"| ${_cell(row.latex)}$ | {_cell(meaning)} | {code} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The rules, over every chapter
# --------------------------------------------------------------------------------------------

def problems(chapters: dict[int, str], table=TABLE) -> list[str]:
    """What breaks the table's rules in ``chapters`` (chapter number -> its Markdown), as sentences.

    - a governed symbol that no row names;
    - a row's symbol absent from the chapter that the row says introduces it;
    - a subscripted symbol that only one row names, used in a chapter before that one (other than
      the chapters the row lists as ``previewed``, which must then use it).
    """
    out = []
    used = {number: chapter_symbols(text) for number, text in chapters.items()}
    for number, text in sorted(chapters.items()):
        out += [f"chapter {number} {problem}" for problem in style_problems(text)]
        for k in sorted(unknown_symbols(text, table)):
            out.append(f"chapter {number} writes ${k}$, which the notation table lacks: add a row "
                       "to tinyformer.course.notation.TABLE")
    owners: dict[str, int] = {}
    for row in table:
        for k in row_keys(row):
            owners[k] = owners.get(k, 0) + 1
    for row in table:
        for k in sorted(row_keys(row)):
            if row.chapter in used and k not in used[row.chapter]:
                out.append(f"the table says chapter {row.chapter} introduces ${k}$, but it does not write it")
            elif owners[k] == 1 and ("_" in k or k.startswith("\\")):
                earlier = [n for n in sorted(used) if n < row.chapter and k in used[n] and n not in row.previewed]
                if earlier:
                    out.append(f"${k}$ is written in chapter {earlier[0]}, before chapter {row.chapter} "
                               "where the table says it is introduced")
        for number in row.previewed:
            if number in used and not row_keys(row) & used[number]:
                out.append(f"the table says chapter {number} uses ${row.latex}$ ahead, but it does not write it")
    return out
