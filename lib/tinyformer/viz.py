"""Plotting helpers shared by the chapters (attention in Chapter 2, interpretability in Chapter 10).

Every helper draws on a Matplotlib ``Axes`` (a new one when ``ax`` is ``None``) and returns it,
so a chapter can place several plots in one figure and add its own titles and labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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


__all__ = ["plot_attention", "plot_heads"]
