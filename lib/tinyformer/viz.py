"""Drawing for the book: the plots several chapters share, and the primitives of its schematics.

Data plots, each drawing on a Matplotlib ``Axes`` (a new one when ``ax`` is ``None``) and
returning it, so a chapter can place several in one figure and add its own titles: attention
weights as a heatmap (:func:`plot_attention`, one panel per head with :func:`plot_heads`;
chapters 2 and 10), one value per layer for several models (:func:`plot_per_layer`; chapters 3 and
10), and the loss curves of a training run (:func:`plot_history`; chapters 6, 7 and 9).

Schematic primitives: an Axes measured in inches (:func:`schematic_axes`), a labelled box
(:func:`box`), an arrow (:func:`arrow`), a grid of coloured cells (:func:`cell_grid`), the ⊕ of a
residual addition (:func:`add_node`), with the book's font size and colours. A schematic drawn for
one chapter lives beside that chapter's experiments (``tinyformer.experiments.chNN.draw_*``) and is
built from these, so every diagram in the book has the same look.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinyformer.validation import check_int


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


# --------------------------------------------------------------------------- schematic primitives
# Schematics are drawn in data coordinates where one unit is one inch of the figure, so boxes,
# arrows and text keep their proportions at any size the page shows them.

FONT = 10        # points; the smallest text of a schematic is 9 pt, readable on a phone
#: one colour per attention head (up to eight)
HEAD_COLOURS = ["#f4a261", "#2a9d8f", "#8d6cc4", "#e76f51", "#4d8fd6", "#9bbb59", "#d4a017", "#c05780"]


def schematic_axes(ax, width: float, height: float):
    """A blank Axes of ``width`` x ``height`` data units (inches, when the figure is new)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def box(ax, cx: float, cy: float, w: float, h: float, text: str, colour: str = "#eef3f8", gid=None):
    """A rounded box centred at ``(cx, cy)`` with centred text; returns the patch."""
    from matplotlib.patches import FancyBboxPatch

    patch = FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                           facecolor=colour, edgecolor="#333333", linewidth=1.2, gid=gid)
    ax.add_patch(patch)
    if text:
        ax.text(cx, cy, text, ha="center", va="center", fontsize=FONT)
    return patch


def arrow(ax, start, end, label: str | None = None, offset=(0.0, 0.12), **text_kw):
    """An arrow from ``start`` to ``end`` (data coordinates), with an optional label at its middle."""
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color="#333333", lw=1.3, shrinkA=0, shrinkB=0,
                                mutation_scale=14))
    if label:
        mx, my = (start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1]
        ax.text(mx, my, label, ha="center", va="bottom", fontsize=FONT, **text_kw)


def cell_grid(ax, x0: float, y_top: float, colours, cell: float, edge: str = "white", gid=None):
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


#: the parts of a model: layer norm, attention, feed-forward, the residual stream, and whatever
#: carries position information
PART_COLOURS = {"ln": "#e6e0f3", "attn": "#fbe3cc", "ffn": "#dcefdc", "stream": "#4d8fd6",
                "position": "#f9d5e5"}


def add_node(ax, cx: float, cy: float, r: float = 0.17):
    """The ⊕ where a sublayer's output is added to the stream."""
    from matplotlib.patches import Circle

    ax.add_patch(Circle((cx, cy), r, facecolor="white", edgecolor="#333333",
                        linewidth=1.3, gid="add", zorder=3))
    ax.text(cx, cy, "+", ha="center", va="center", fontsize=12, zorder=4)


__all__ = ["FONT", "HEAD_COLOURS", "PART_COLOURS", "add_node", "arrow", "box", "cell_grid", "plot_attention",
           "plot_heads", "plot_history", "plot_per_layer", "schematic_axes"]
