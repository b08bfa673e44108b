"""Plotting helpers shared by the chapters (attention in Chapter 2, interpretability in Chapter 10).

Every helper draws on a Matplotlib ``Axes`` (a new one when ``ax`` is ``None``) and returns it,
so a chapter can place several plots in one figure and add its own titles and labels. Three of
them are schematics rather than plots of data: one attention head's dataflow
(:func:`draw_head_dataflow`), the split-heads reshape of multi-head attention
(:func:`draw_split_heads`), and a transformer block in either norm placement (:func:`draw_block`).
Chapter 3's per-layer measurements are drawn with :func:`plot_per_layer`; Chapter 4 adds a schematic of
where positions enter a model (:func:`draw_position_paths`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinyformer.setup import check_int


def _as_array(weights, name: str) -> np.ndarray:
    """A float NumPy copy of a tensor, array or nested list (detached from autograd, on the CPU)."""
    if hasattr(weights, "detach"):  # a torch.Tensor, without importing torch here
        weights = weights.detach().to("cpu").float().numpy()
    try:
        arr = np.asarray(weights, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a tensor or array of numbers, "
                        f"got {type(weights).__name__}") from err
    return arr


def _check_labels(labels, n: int, name: str, axis: str) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type(labels).__name__}")
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the weights have {n} {axis}")
    return [str(t) for t in labels]


def plot_attention(weights, tokens: Sequence[str] | None = None, ax=None, *,
                   key_tokens: Sequence[str] | None = None, title: str | None = None,
                   annotate: bool = False, cmap: str = "Blues", colorbar: bool = True):
    """Draw one attention pattern as a heatmap: row ``i`` is query ``i``, column ``j`` is key ``j``.

    weights: ``(T_q, T_k)`` tensor or array, usually rows of a softmax (each sums to 1).
    tokens: labels of the queries (rows), ``T_q`` of them; they also label the keys (columns)
    unless ``key_tokens`` (``T_k`` labels) is given, as for cross-attention.
    annotate: write each weight in its cell (readable up to about 12 tokens).
    Returns the ``Axes``. Raises ``ValueError`` for a weights array that is not 2-D or for a
    number of labels that does not match its shape.
    """
    w = _as_array(weights, "weights")
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D (T_q, T_k), got shape {w.shape}; "
                         "select one batch element and one head first, e.g. weights[0, h]")
    T_q, T_k = w.shape
    rows = _check_labels(tokens, T_q, "tokens", "rows (queries)")
    if key_tokens is None and rows is not None and T_q != T_k:
        raise ValueError(f"tokens label {T_q} queries but there are {T_k} keys: "
                         "pass key_tokens as well")
    cols = rows
    if key_tokens is not None:
        cols = _check_labels(key_tokens, T_k, "key_tokens", "columns (keys)")

    import matplotlib.pyplot as plt  # imported here so that importing tinyformer stays light

    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.45 * T_k + 1.5), max(2.5, 0.45 * T_q + 1.0)))
    vmax = max(1.0, float(np.nanmax(w))) if np.isfinite(w).any() else 1.0
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="equal")
    if cols is not None:
        ax.set_xticks(range(T_k), cols, rotation=60, ha="right", rotation_mode="anchor")
    if rows is not None:
        ax.set_yticks(range(T_q), rows)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate:
        for i in range(T_q):
            for j in range(T_k):
                if w[i, j] >= 0.005:
                    colour = "white" if w[i, j] > 0.6 * vmax else "black"
                    ax.text(j, i, f"{w[i, j]:.2f}".lstrip("0"), ha="center", va="center",
                            fontsize=7, color=colour)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_heads(weights, tokens: Sequence[str] | None = None, *, titles: Sequence[str] | None = None,
               annotate: bool = False, size: float = 3.6):
    """Draw the patterns of several heads side by side; ``weights`` is ``(n_heads, T, T)``.

    Returns the figure. Each panel is :func:`plot_attention` of one head, titled ``head h`` unless
    ``titles`` (one per head) is given.
    """
    w = _as_array(weights, "weights")
    if w.ndim != 3:
        raise ValueError(f"weights must be 3-D (n_heads, T_q, T_k), got shape {w.shape}; "
                         "select one batch element first, e.g. weights[0]")
    n_heads = w.shape[0]
    if titles is not None:
        titles = _check_labels(titles, n_heads, "titles", "heads")

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n_heads, figsize=(size * n_heads + 0.8, size), squeeze=False)
    for h, ax in enumerate(axes[0]):
        plot_attention(w[h], tokens, ax=ax, title=titles[h] if titles else f"head {h}",
                       annotate=annotate, colorbar=False)
        if h > 0:
            ax.set_ylabel("")
    fig.colorbar(axes[0, -1].images[0], ax=list(axes[0]), fraction=0.046 / n_heads, pad=0.02,
                 label="attention weight")
    return fig


# --------------------------------------------------------------------------- schematics
# The two schematics below are drawn in data coordinates where one unit is one inch of the
# figure, so boxes, arrows and text keep their proportions at any size the page shows them.

_FONT = 10        # points; the smallest text of a schematic is 9 pt, readable on a phone
_HEAD_COLOURS = ["#f4a261", "#2a9d8f", "#8d6cc4", "#e76f51", "#4d8fd6", "#9bbb59", "#d4a017", "#c05780"]


def _schematic_axes(ax, width: float, height: float):
    """A blank Axes of ``width`` x ``height`` data units (inches, when the figure is new)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def _box(ax, cx: float, cy: float, w: float, h: float, text: str, colour: str = "#eef3f8", gid=None):
    """A rounded box centred at ``(cx, cy)`` with centred text; returns the patch."""
    from matplotlib.patches import FancyBboxPatch

    patch = FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                           facecolor=colour, edgecolor="#333333", linewidth=1.2, gid=gid)
    ax.add_patch(patch)
    if text:
        ax.text(cx, cy, text, ha="center", va="center", fontsize=_FONT)
    return patch


def _arrow(ax, start, end, label: str | None = None, offset=(0.0, 0.12), **text_kw):
    """An arrow from ``start`` to ``end`` (data coordinates), with an optional label at its middle."""
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color="#333333", lw=1.3, shrinkA=0, shrinkB=0,
                                mutation_scale=14))
    if label:
        mx, my = (start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1]
        ax.text(mx, my, label, ha="center", va="bottom", fontsize=_FONT, **text_kw)


def _grid(ax, x0: float, y_top: float, colours, cell: float, edge: str = "white", gid=None):
    """Draw a matrix of coloured cells, ``colours[i][j]`` for row ``i`` (top) and column ``j``;
    ``(x0, y_top)`` is the top-left corner. Returns the list of patches."""
    from matplotlib.patches import Rectangle

    patches = []
    for i, row in enumerate(colours):
        for j, colour in enumerate(row):
            rect = Rectangle((x0 + j * cell, y_top - (i + 1) * cell), cell, cell, facecolor=colour,
                             edgecolor=edge, linewidth=0.8, gid=gid)
            ax.add_patch(rect)
            patches.append(rect)
    return patches


def draw_head_dataflow(ax=None, T: int = 4):
    """Draw the dataflow of ONE causal attention head, with the shape of every tensor.

    x ``(T, d_model)`` → three projections → q, k ``(T, d_k)`` and v ``(T, d_v)`` → scores
    ``q kᵀ / √d_k`` ``(T, T)`` → causal mask (−∞ above the diagonal) → softmax over each row
    (the weights) → weights · v ``(T, d_v)``. The three ``(T, T)`` stages show a small ``T x T``
    example (``T`` from 2 to 8). Returns the ``Axes``; it is laid out for a new 9 x 4.3 in figure,
    which is what ``ax=None`` makes (pass an ``ax`` of about that size).
    """
    T = check_int("T", T, minimum=2)
    if T > 8:
        raise ValueError(f"T must be at most 8 for the small matrices to stay readable, got {T}")
    ax = _schematic_axes(ax, 9.0, 4.3)
    rng = np.random.default_rng(0)                            # fixed: the picture never changes
    scores = rng.normal(size=(T, T))
    lower = np.tril(np.ones((T, T), dtype=bool))              # allowed: key j <= query i
    weights = np.where(lower, np.exp(scores), 0.0)
    weights /= weights.sum(axis=1, keepdims=True)

    import matplotlib as mpl

    blues = mpl.colormaps["Blues"]
    shade = (scores - scores.min()) / (scores.max() - scores.min())
    score_cols = [[blues(0.15 + 0.6 * shade[i, j]) for j in range(T)] for i in range(T)]
    mask_cols = [[score_cols[i][j] if lower[i, j] else "#4a4a4a" for j in range(T)] for i in range(T)]
    weight_cols = [[blues(0.1 + 0.85 * weights[i, j]) if lower[i, j] else "white" for j in range(T)]
                   for i in range(T)]

    # inputs and the three projections
    _box(ax, 0.7, 2.35, 1.2, 0.8, "$x$\n(T, $d_\\mathrm{model}$)", colour="#f6f1e7", gid="x")
    rows = {"q": 3.55, "k": 2.35, "v": 0.7}
    widths = {"q": "d_k", "k": "d_k", "v": "d_v"}
    for name, y in rows.items():
        _box(ax, 2.75, y, 1.4, 0.78, f"${name} = x\\,W_{name.upper()}$\n(T, ${widths[name]}$)", gid=name)
        _arrow(ax, (1.3, 2.35), (2.05, y))

    # the three (T, T) stages, each a box holding a small matrix
    cell = 0.17
    stages = [(4.8, "scores\n$q\\,k^\\top / \\sqrt{d_k}$", score_cols, "(T, T)"),
              (6.4, "causal mask", mask_cols, "$-\\infty$ above\nthe diagonal"),
              (8.0, "softmax\nover each row", weight_cols, "weights (T, T)")]
    for cx, title, colours, note in stages:
        _box(ax, cx, 2.95, 1.4, 2.1, "", gid="stage")
        ax.text(cx, 3.92, title, ha="center", va="top", fontsize=_FONT)
        _grid(ax, cx - T * cell / 2, 3.15, colours, cell, gid="matrix")
        ax.text(cx, 3.15 - T * cell - 0.1, note, ha="center", va="top", fontsize=9)
    _arrow(ax, (3.45, 3.55), (4.1, 3.25))                     # q -> scores
    _arrow(ax, (3.45, 2.35), (4.1, 2.65))                     # k -> scores
    _arrow(ax, (5.5, 2.95), (5.7, 2.95))
    _arrow(ax, (7.1, 2.95), (7.3, 2.95))

    # the weighted sum of the values
    _box(ax, 7.85, 0.7, 1.9, 0.85, "output = weights · v\n(T, $d_v$)", colour="#e7f3ea", gid="output")
    _arrow(ax, (8.0, 1.9), (8.0, 1.13))                       # weights -> output
    _arrow(ax, (3.45, 0.7), (6.9, 0.7), label="values v: what each key hands over")
    ax.text(7.9, 1.52, "row i: how much\nquery i takes\nfrom each key", ha="right", va="center",
            fontsize=9, color="#444444")
    return ax


def draw_split_heads(ax=None, n_heads: int = 3, d_head: int = 2, T: int = 4):
    """Draw how multi-head attention splits a projection into heads and merges them again.

    A ``(T, d_model)`` projection (``d_model = n_heads·d_head``) with its columns coloured by head →
    reshape ``(T, n_heads, d_head)`` → transpose ``(n_heads, T, d_head)``, one panel per head →
    each head attends on its own → transpose back and reshape, i.e. concatenate, ``(T, d_model)`` →
    ``W_O`` mixes the heads. Head ``h`` owns the contiguous columns ``h·d_head : (h+1)·d_head``.
    ``T`` is the number of rows drawn. Returns the ``Axes``; ``ax=None`` makes a new figure of
    about 9 x 3 in, the size the layout is made for.
    """
    n_heads = check_int("n_heads", n_heads)
    d_head = check_int("d_head", d_head)
    T = check_int("T", T)
    if n_heads > len(_HEAD_COLOURS) or n_heads * d_head > 12 or T > 6:
        raise ValueError(f"the drawing stays readable up to {len(_HEAD_COLOURS)} heads, d_model = "
                         f"n_heads·d_head <= 12 and T <= 6; got n_heads={n_heads}, d_head={d_head}, T={T}")
    d_model = n_heads * d_head
    cell = min(0.18, 1.1 / d_model)                           # a (T, d_model) panel is at most 1.1 in wide
    full_w, panel_w, head_h = d_model * cell, d_head * cell, T * cell
    gap, step = 0.6 * cell, 0.4                               # between reshaped blocks; arrow length
    reshape_w = full_w + (n_heads - 1) * gap
    stack_h = n_heads * head_h + (n_heads - 1) * 0.35         # heads stacked, 0.35 in apart
    xs = [0.2]                                                # left edges of the six stages
    for width, arrow in ((full_w, step), (reshape_w, 0.9), (panel_w, 1.1), (panel_w, step), (full_w, 0.6)):
        xs.append(xs[-1] + width + arrow)
    height = max(2.6, stack_h + 1.35)
    ax = _schematic_axes(ax, xs[-1] + full_w + 0.2, height)
    mid = 0.45 + stack_h / 2                                  # the centre line of the drawing
    top = mid + head_h / 2                                    # top of the (T, ...) panels
    panel_tops = [mid + stack_h / 2 - h * (head_h + 0.35) for h in range(n_heads)]
    colour_of_col = [_HEAD_COLOURS[c // d_head] for c in range(d_model)]

    def caption(x0, width, title, shape, y_top, y_bottom):
        ax.text(x0 + width / 2, y_top + 0.1, title, ha="center", va="bottom", fontsize=_FONT)
        ax.text(x0 + width / 2, y_bottom - 0.1, shape, ha="center", va="top", fontsize=9)

    def link(i, width, above=None):
        """The arrow from stage i (of the given width) to stage i + 1, with an optional label."""
        start, end = (xs[i] + width + 0.06, mid), (xs[i + 1] - 0.06, mid)
        _arrow(ax, start, end)
        if above:
            ax.text((start[0] + end[0]) / 2, mid + 0.08, above, ha="center", va="bottom", fontsize=_FONT)

    # 1. the projection, e.g. Q = x W_Q, its columns coloured by the head that owns them
    _grid(ax, xs[0], top, [colour_of_col] * T, cell, gid="projection")
    every = cell >= 0.15                                      # room to number every column?
    for c in range(0, d_model, 1 if every else d_head):       # else only where each head starts
        ax.text(xs[0] + (c + 0.5) * cell, top + 0.03, str(c), ha="center", va="bottom", fontsize=9)
    caption(xs[0], full_w, "$Q = x\\,W_Q$", "(T, $d_\\mathrm{model}$)", top + 0.2, top - head_h)
    link(0, full_w)

    # 2. reshape: the same numbers, each row cut into n_heads consecutive blocks of d_head
    for h in range(n_heads):
        _grid(ax, xs[1] + h * (panel_w + gap), top, [[_HEAD_COLOURS[h]] * d_head] * T, cell, gid="reshaped")
    caption(xs[1], reshape_w, "reshape", "(T, $n_\\mathrm{heads}$, $d_\\mathrm{head}$)", top, top - head_h)
    link(1, reshape_w)

    # 3. transpose: the head axis moves in front; head h is a (T, d_head) panel of its own
    for h, y in enumerate(panel_tops):
        _grid(ax, xs[2], y, [[_HEAD_COLOURS[h]] * d_head] * T, cell, gid="head")
        first, last = h * d_head, (h + 1) * d_head - 1        # the columns of Q this head owns
        if every:
            for c in range(d_head):
                ax.text(xs[2] + (c + 0.5) * cell, y + 0.03, str(first + c), ha="center", va="bottom", fontsize=9)
        else:
            ax.text(xs[2] + panel_w / 2, y + 0.03, f"{first}–{last}", ha="center", va="bottom", fontsize=9)
        ax.text(xs[2] - 0.06, y - cell / 2, f"head {h}", ha="right", va="center", fontsize=9)
    caption(xs[2], panel_w, "transpose", "($n_\\mathrm{heads}$,\nT, $d_\\mathrm{head}$)",
            panel_tops[0] + 0.18, panel_tops[-1] - head_h)
    link(2, panel_w, above="attend,\neach head\nalone")

    # 4. the heads' outputs, same shape
    for h, y in enumerate(panel_tops):
        _grid(ax, xs[3], y, [[_HEAD_COLOURS[h]] * d_head] * T, cell, edge="#333333", gid="head_out")
    caption(xs[3], panel_w, "outputs", "($n_\\mathrm{heads}$,\nT, $d_\\mathrm{head}$)",
            panel_tops[0] + 0.03, panel_tops[-1] - head_h)
    link(3, panel_w)

    # 5. merge: transpose back and reshape, i.e. concatenate the heads side by side
    _grid(ax, xs[4], top, [colour_of_col] * T, cell, edge="#333333", gid="merged")
    caption(xs[4], full_w, "concatenate", "(T, $d_\\mathrm{model}$)", top, top - head_h)
    link(4, full_w, above="$\\cdot\\, W_O$")

    # 6. W_O mixes the heads: every output column draws on every head
    _grid(ax, xs[5], top, [["#9aa5b1"] * d_model] * T, cell, edge="#333333", gid="output")
    caption(xs[5], full_w, "heads mixed", "(T, $d_\\mathrm{model}$)", top, top - head_h)
    return ax


_COLOURS = {"ln": "#e6e0f3", "attn": "#fbe3cc", "ffn": "#dcefdc",
            "stream": "#4d8fd6"}


def _add_node(ax, cx: float, cy: float, r: float = 0.17):
    """The ⊕ where a sublayer's output is added to the stream."""
    from matplotlib.patches import Circle

    ax.add_patch(Circle((cx, cy), r, facecolor="white", edgecolor="#333333",
                        linewidth=1.3, gid="add", zorder=3))
    ax.text(cx, cy, "+", ha="center", va="center", fontsize=12, zorder=4)


def draw_block(norm: str = "pre", ax=None):
    """Draw one transformer block on its residual stream, bottom to top.

    ``norm="pre"``: each sublayer reads the stream through its own layer
    norm and its output is added to the stream, which is never normalised
    inside the block. ``norm="post"``: each sublayer reads the stream
    directly, and the stream is layer-normalised right after each
    addition. The stream is the vertical line; ⊕ marks an addition.
    Returns the ``Axes``; ``ax=None`` makes a new 4.4 x 6 in figure, the size
    the layout is made for.
    """
    if norm not in ("pre", "post"):
        raise ValueError(f"norm must be 'pre' or 'post', got {norm!r}")
    ax = _schematic_axes(ax, 4.4, 6.0)
    sx, bx, w = 1.1, 3.0, 2.1                   # stream x, branch x, box width
    # the residual stream: a thick line from x_l to x_(l+1)
    ax.plot([sx, sx], [0.55, 5.45], color=_COLOURS["stream"], lw=4,
            solid_capstyle="butt", zorder=1, gid="stream")
    _arrow(ax, (sx, 5.3), (sx, 5.62))
    ax.text(sx, 0.45, "$x_\\ell$  (B, T, $d_\\mathrm{model}$)", ha="center",
            va="top", fontsize=_FONT)
    ax.text(sx, 5.68, "$x_{\\ell+1}$", ha="center", va="bottom",
            fontsize=_FONT)
    ax.text(sx - 0.3, 1.3, "residual stream", rotation=90, ha="center",
            va="center", fontsize=9, color=_COLOURS["stream"])

    def branch(y0, y_add, boxes):
        """Leave the stream at y0, go through boxes (y, text, kind) on the
        right, and come back to a ⊕ on the stream at y_add."""
        ax.plot([sx, bx], [y0, y0], color="#333333", lw=1.3, zorder=1)
        prev = y0
        for y, text, kind in boxes:
            _arrow(ax, (bx, prev), (bx, y - 0.26))
            _box(ax, bx, y, w, 0.52, text, colour=_COLOURS[kind], gid=kind)
            prev = y + 0.26
        ax.plot([bx, bx], [prev, y_add], color="#333333", lw=1.3, zorder=1)
        _arrow(ax, (bx, y_add), (sx + 0.17, y_add))
        _add_node(ax, sx, y_add)

    def stream_norm(y, name):
        _box(ax, sx, y, 1.2, 0.5, f"LayerNorm\n{name}",
             colour=_COLOURS["ln"], gid="ln")

    attn = "multi-head attention\n(mixes positions)"
    ffn = "feed-forward\n(each position alone)"
    if norm == "pre":
        branch(0.8, 2.6, [(1.35, "LayerNorm ln_1", "ln"),
                          (2.1, attn, "attn")])
        branch(3.0, 4.8, [(3.55, "LayerNorm ln_2", "ln"),
                          (4.3, ffn, "ffn")])
        ax.text(bx, 5.5, "pre-norm: $x + f(\\mathrm{LN}(x))$", ha="center",
                va="center", fontsize=_FONT)
    else:
        branch(0.8, 1.75, [(1.3, attn, "attn")])
        stream_norm(2.35, "ln_1")
        branch(2.95, 3.95, [(3.5, ffn, "ffn")])
        stream_norm(4.6, "ln_2")
        ax.text(bx, 5.5, "post-norm: $\\mathrm{LN}(x + f(x))$", ha="center",
                va="center", fontsize=_FONT)
    return ax


def _plain_log_labels(ax):
    """Label a log y axis with plain numbers (1, 2, 3, 5, 10, ...)."""
    from matplotlib.ticker import FuncFormatter

    def major(v, _):
        return f"{v:g}"

    def minor(v, _):
        if v <= 0:
            return ""
        lead = round(v / 10 ** np.floor(np.log10(v)))
        return f"{v:g}" if lead in (2, 3, 5) else ""

    ax.yaxis.set_major_formatter(FuncFormatter(major))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def plot_per_layer(curves: dict, ax=None, *, ylabel: str = "",
                   title: str | None = None, log: bool = True,
                   xlabel: str = "layer", start: int = 0):
    """Plot one value per layer for several models: ``curves`` maps a label
    to a sequence of numbers (its ``i``-th number is drawn at layer
    ``start + i``), on a logarithmic y axis unless ``log=False``. Returns the
    ``Axes``."""
    if not isinstance(curves, dict) or not curves:
        raise TypeError("curves must be a non-empty dict of label -> values")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    for label, values in curves.items():
        v = _as_array(values, f"curves[{label!r}]")
        if v.ndim != 1:
            raise ValueError(f"curves[{label!r}] must be 1-D, got shape "
                             f"{v.shape}")
        ax.plot(np.arange(start, start + len(v)), v, marker="o",
                markersize=3, label=str(label))
    if log:
        ax.set_yscale("log")
        values = np.concatenate([_as_array(v, "curves").ravel()
                                 for v in curves.values()])
        values = values[np.isfinite(values) & (values > 0)]
        if values.size and values.max() < 100 * values.min():
            _plain_log_labels(ax)        # a narrow range: 2, 3, 5, not 2×10⁰
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


# --------------------------------------------------------------------------- chapter 4

_POSITION_COLOUR = "#f9d5e5"       # whatever carries position information


def draw_position_paths(ax=None):
    """Draw where positions enter a model, in two panels side by side.

    Left, an **absolute** scheme (learned, sinusoidal or binary): a table of
    position vectors ``PE[t]`` is added to the token embeddings once, at the
    input, and the blocks above see only the sum. Right, **rotary**
    positions: nothing is added at the input; inside every attention layer
    the queries and keys (never the values) are rotated by an angle
    proportional to their position before the scores are taken. Patches that
    carry positions have ``gid="position"``. Returns the ``Axes``; ``ax=None``
    makes a new 8.8 x 5.4 in figure, the size the layout is made for.
    """
    ax = _schematic_axes(ax, 8.8, 5.4)
    pink = _POSITION_COLOUR
    # ---- left: absolute positions, added once
    lx = 1.7
    ax.text(2.2, 5.25, "absolute: added once, at the input", ha="center",
            va="center", fontsize=_FONT, weight="bold")
    _box(ax, lx, 0.45, 2.0, 0.45, "token ids (B, T)")
    _arrow(ax, (lx, 0.68), (lx, 1.0))
    _box(ax, lx, 1.25, 2.0, 0.5, "token embedding")
    _arrow(ax, (lx, 1.5), (lx, 1.83))
    _add_node(ax, lx, 2.0)
    _box(ax, 3.35, 2.0, 1.5, 0.62, "position table\nPE[t]  (T, $d_\\mathrm{model}$)",
         colour=pink, gid="position")
    _arrow(ax, (2.6, 2.0), (lx + 0.17, 2.0))
    _arrow(ax, (lx, 2.17), (lx, 2.6))
    _box(ax, lx, 3.35, 2.6, 1.5, "", colour=_COLOURS["attn"], gid="blocks")
    ax.text(lx, 3.35, "blocks 1 … L\n(attention and FFN)\nsee token + position\n"
            "mixed in one vector", ha="center", va="center", fontsize=_FONT)
    _arrow(ax, (lx, 4.1), (lx, 4.45))
    _box(ax, lx, 4.7, 2.0, 0.45, "linear head → logits")
    # ---- right: rotary positions, inside every attention layer
    rx = 6.55
    ax.text(rx, 5.25, "rotary: in every layer, on q and k", ha="center",
            va="center", fontsize=_FONT, weight="bold")
    _box(ax, rx, 0.45, 2.0, 0.45, "token ids (B, T)")
    _arrow(ax, (rx, 0.68), (rx, 1.0))
    _box(ax, rx, 1.25, 2.0, 0.5, "token embedding")
    _arrow(ax, (rx, 1.5), (rx, 1.85))
    _box(ax, rx, 3.1, 4.0, 2.5, "", colour=_COLOURS["attn"], gid="blocks")
    ax.text(4.7, 4.2, "attention, in each of blocks 1 … L", ha="left",
            va="center", fontsize=9, style="italic")
    ax.plot([5.35, 7.75], [2.0, 2.0], color="#333333", lw=1.3)
    ax.plot([rx, rx], [1.85, 2.0], color="#333333", lw=1.3)
    for cx, name in ((5.35, "$W_Q$"), (6.55, "$W_K$"), (7.75, "$W_V$")):
        _arrow(ax, (cx, 2.0), (cx, 2.19))
        _box(ax, cx, 2.4, 0.9, 0.42, name, colour="white")
    for cx, name in ((5.35, "rotate q\nby $t\\,\\theta_i$"),
                     (6.55, "rotate k\nby $t\\,\\theta_i$")):
        _arrow(ax, (cx, 2.61), (cx, 2.74))
        _box(ax, cx, 3.05, 1.05, 0.62, name, colour=pink, gid="position")
        _arrow(ax, (cx, 3.36), (cx, 3.59))
    _arrow(ax, (7.75, 2.61), (7.75, 3.59))
    ax.text(7.82, 3.1, "v: not\nrotated", ha="left", va="center", fontsize=9)
    _box(ax, rx, 3.8, 3.6, 0.42, "scores, softmax, average of v",
         colour="white")
    _arrow(ax, (rx, 4.35), (rx, 4.47))
    _box(ax, rx, 4.7, 2.0, 0.45, "linear head → logits")
    return ax


def draw_gpt(ax=None):
    """Draw the whole GPT as one column, with the shape of what flows between
    the parts, the weight shared by the embedding and the LM head (tied), and
    the decoding loop that appends each sampled token to the input.

    The tied matrix is drawn once, between the two boxes that use it
    (``gid="tied"``). Returns the ``Axes``; ``ax=None`` makes a new
    7.6 x 6.4 in figure, the size the layout is made for.
    """
    ax = _schematic_axes(ax, 7.6, 6.4)
    cx, w = 2.9, 2.9
    steps = [   # (y, text, colour, shape of the output)
        (0.45, "token ids", "#eef3f8", "(B, T)"),
        (1.25, "token embedding  E[idx]", "#dcefdc", "(B, T, $d_\\mathrm{model}$)"),
        (2.05, "+ positions (learned or\nsinusoidal; rotary: in attention)", _POSITION_COLOUR,
         "(B, T, $d_\\mathrm{model}$)"),
        (3.2, "transformer blocks × L\n(Chapters 2 to 4)", _COLOURS["attn"], "(B, T, $d_\\mathrm{model}$)"),
        (4.25, "final layer norm", _COLOURS["ln"], "(B, T, $d_\\mathrm{model}$)"),
        (5.05, "LM head  h $E^{\\top}$ → logits", "#dcefdc", "(B, T, V)"),
    ]
    heights = {3.2: 0.95, 2.05: 0.62}
    for i, (y, text, colour, shape) in enumerate(steps):
        h = heights.get(y, 0.5)
        _box(ax, cx, y, w, h, text, colour=colour)
        ax.text(cx + w / 2 + 0.12, y, shape, ha="left", va="center", fontsize=9, color="#555555")
        if i:
            below = steps[i - 1][0] + heights.get(steps[i - 1][0], 0.5) / 2
            _arrow(ax, (cx, below), (cx, y - h / 2))
    # the tied matrix, drawn once, used at both ends
    tx = 6.7
    _box(ax, tx, 3.15, 1.5, 0.95, "E\n(V, $d_\\mathrm{model}$)\none matrix", colour="#dcefdc", gid="tied")
    for y in (1.25, 5.05):
        ax.annotate("", xy=(5.65, y), xytext=(tx - 0.75, 3.15 + (0.3 if y > 3 else -0.3)),
                    arrowprops=dict(arrowstyle="-|>", color="#2a7a2a", lw=1.2, ls="--", mutation_scale=12))
    ax.text(tx, 2.6, "tied weights", ha="center", va="top", fontsize=9, color="#2a7a2a")
    # decoding: softmax over the last position, sample, append, run again
    _arrow(ax, (cx, 5.3), (cx, 5.62))
    _box(ax, cx, 5.85, w, 0.42, "softmax → sample one token", colour="white")
    loop = 1.1
    ax.plot([cx - w / 2, loop, loop], [5.85, 5.85, 0.45], color="#8d6cc4", lw=1.3)
    ax.annotate("", xy=(cx - w / 2, 0.45), xytext=(loop, 0.45),
                arrowprops=dict(arrowstyle="-|>", color="#8d6cc4", lw=1.3, shrinkA=0, shrinkB=0,
                                mutation_scale=14))
    ax.text(loop - 0.1, 3.2, "decoding:\nappend it,\nrun again", ha="right", va="center", fontsize=9,
            color="#8d6cc4")
    return ax


def plot_history(history: dict, ax=None, *, label: str = "", smooth: int = 20,
                 color=None):
    """The loss curves of :func:`tinyformer.training.train`'s history:
    the training loss (a running mean over ``smooth`` steps, since single
    batches are noisy) as a line, the validation loss as dots on it.
    Returns the axes."""
    import matplotlib.pyplot as plt

    if not isinstance(history, dict) or not {"step", "loss"} <= set(history):
        raise ValueError("history must be the dict train() returns, with "
                         "'step' and 'loss' (and 'val_step', 'val_loss')")
    smooth = check_int("smooth", smooth)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    loss = np.asarray(history["loss"], dtype=float)
    if len(loss) == 0:
        raise ValueError("history holds no steps")
    kernel = np.ones(min(smooth, len(loss))) / min(smooth, len(loss))
    running = np.convolve(loss, kernel, mode="valid")
    steps = np.asarray(history["step"])[len(loss) - len(running):]
    name = f"{label} " if label else ""
    line, = ax.plot(steps, running, color=color, label=f"{name}training")
    if history.get("val_step"):
        ax.plot(history["val_step"], history["val_loss"], "o--",
                color=line.get_color(), markersize=4, linewidth=1,
                label=f"{name}validation")
    ax.set(xlabel="step", ylabel="loss (nats per token)")
    ax.legend(fontsize=8)
    return ax


__all__ = ["draw_block", "draw_gpt", "draw_head_dataflow", "draw_position_paths", "draw_split_heads", "plot_attention",
           "plot_heads", "plot_history", "plot_per_layer"]
