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

An interactive view for the web book and Jupyter: :func:`attention_widget` returns an object whose
HTML (self-contained, no network) lets a reader pick a layer and a head and point at a token to see
the keys it attends to (chapter 10).
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass

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

#: The schematics' font size in points; the smallest text of a schematic is 9 pt, readable on a phone.
FONT = 10
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


# --------------------------------------------------------------------------- interactive attention viewer
# One cell output that works offline in Jupyter and in the built book: HTML with its own <style> and
# <script> (MyST-NB copies a text/html output into the page as it is). The weights travel as JSON in
# thousandths, each row without its trailing zeros (a causal row i has only i + 1 weights), so two
# layers of four heads over 32 tokens take about 20 kB.

_WIDGET_SCALE = 1000      # weights are stored as integers in thousandths: rounded to 3 decimals
_WIDGET_RGB = "8,81,156"  # the dark blue of Matplotlib's "Blues", as plot_attention draws
_widgets_made: dict[str, int] = {}  # content hash -> widgets made with it, so that repeats get their own id

_WIDGET_CSS = """
.tf-attn-widget{box-sizing:border-box;max-width:100%;overflow-x:auto;margin:.5em 0;padding:.6em;
 border:1px solid #d0d7de;border-radius:6px;background:#fff;color:#1f2328;
 font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
.tf-attn-widget *{box-sizing:border-box}
.tf-attn-widget p{margin:.3em 0}
.tf-attn-bar{display:flex;flex-wrap:wrap;gap:4px;align-items:center;margin:0 0 .4em}
.tf-attn-bar>span{min-width:3em;color:#57606a}
.tf-attn-widget button{display:inline-flex;flex-direction:column;align-items:center;gap:2px;margin:0;
 padding:2px 8px;font:inherit;color:inherit;background:#f6f8fa;border:1px solid #8c959f;border-radius:4px;
 cursor:pointer}
.tf-attn-widget button[aria-pressed=true]{background:#dbe9f6;border-color:#08519c;box-shadow:inset 0 0 0 1px #08519c}
.tf-attn-widget canvas{display:block;max-width:100%;height:auto;border:1px solid #d0d7de;image-rendering:pixelated}
.tf-attn-heads canvas{image-rendering:auto}  /* thumbnails are scaled down */
.tf-attn-toks{display:flex;flex-wrap:wrap;gap:2px;margin:.4em 0;padding:2px;
 font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.tf-attn-tok{min-width:1.3em;padding:1px 3px;text-align:center;white-space:pre-wrap;overflow-wrap:anywhere;
 border:1px solid #d0d7de;border-radius:3px;cursor:pointer}
.tf-attn-tok.tf-attn-q{outline:2px solid #d1495b}
.tf-attn-tok.tf-attn-future{color:#8c959f;border-style:dashed}
.tf-attn-note{color:#57606a;font-size:90%}
"""

# Reads its data, builds the layer and head buttons (each head's button shows a thumbnail of its
# pattern), then redraws the token highlights and the heat grid whenever the selection changes.
# It finds its root through document.currentScript, so the same output shown twice works too.
_WIDGET_JS = """
(() => {
  const me = document.currentScript;
  const root = (me && me.closest(".tf-attn-widget")) || document.getElementById("__ID__");
  if (!root || root.dataset.ready) return;
  const data = JSON.parse(root.querySelector(".tf-attn-data").textContent);
  const $ = (sel) => root.querySelector(sel);
  const toks = [...root.querySelectorAll(".tf-attn-tok")], T = toks.length;
  const st = {layer: data.layer, head: data.head, query: data.query, key: null};
  const weight = (l, h, i, j) => (data.w[l][h][i][j] || 0) / data.scale;  // trailing zeros are not stored
  const colour = (w) => "rgba(" + data.rgb + "," + w + ")";
  const text = (i) => "\\u201c" + toks[i].textContent + "\\u201d";

  function grid(canvas, l, h, px, q, k) {  // the T x T pattern; q outlines a query row, k one of its keys
    const cell = Math.max(1, Math.floor(px / T)), size = cell * T, dpr = window.devicePixelRatio || 1;
    canvas.width = canvas.height = Math.round(size * dpr);
    canvas.style.width = size + "px";  // max-width: 100% shrinks it in a narrow box
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff";
    g.fillRect(0, 0, size, size);
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < T; j++) {
        const w = weight(l, h, i, j);
        if (w > 0) { g.fillStyle = colour(w); g.fillRect(j * cell, i * cell, cell, cell); }
      }
    }
    g.strokeStyle = "#d1495b";
    g.lineWidth = 1.5;
    if (q !== null) g.strokeRect(0.75, q * cell + 0.75, size - 1.5, cell - 1.5);
    if (q !== null && k !== null) { g.lineWidth = 2.5; g.strokeRect(k * cell + 1, q * cell + 1, cell - 2, cell - 2); }
  }

  function buttons(bar, labels, onpick) {  // one toggle button per label
    bar.querySelectorAll("button").forEach((b) => b.remove());
    return labels.map((label, n) => {
      const b = document.createElement("button");
      b.type = "button";
      b.append(label);
      b.addEventListener("click", () => onpick(n));
      bar.append(b);
      return b;
    });
  }

  let headButtons = [];
  const layerButtons = buttons($(".tf-attn-layers"), data.layers, (l) => { st.layer = l; heads(); show(); });
  function heads() {  // the head buttons of the current layer, each with its pattern in small
    headButtons = buttons($(".tf-attn-heads"), data.heads[st.layer], (h) => { st.head = h; show(); });
    headButtons.forEach((b, h) => {
      const c = document.createElement("canvas");
      c.setAttribute("aria-hidden", "true");
      b.prepend(c);
      grid(c, st.layer, h, 2 * data.thumb, null, null);  // drawn finer than shown: smooth when scaled down
      c.style.width = data.thumb + "px";
    });
  }

  function show() {  // token highlights, heat grid and captions for the current selection
    const [l, h, q, k] = [st.layer, st.head, st.query, st.key];
    layerButtons.forEach((b, n) => b.setAttribute("aria-pressed", n === l));
    headButtons.forEach((b, n) => b.setAttribute("aria-pressed", n === h));
    let top = 0;
    toks.forEach((t, j) => {
      const w = weight(l, h, q, j);
      if (w > weight(l, h, q, top)) top = j;
      t.style.backgroundColor = colour(w);
      t.style.color = w > 0.55 ? "#fff" : "";  // dark cells need light text
      t.classList.toggle("tf-attn-q", j === q);
      t.classList.toggle("tf-attn-future", data.causal && j > q);
      t.title = "weight " + w.toFixed(3);
    });
    grid($(".tf-attn-grid"), l, h, data.width, q, k);
    $(".tf-attn-caption").textContent = data.layers[l] + " \\u00b7 " + data.heads[l][h] + ": query " + q + " "
      + text(q) + " puts most weight on " + top + " " + text(top) + " (" + weight(l, h, q, top).toFixed(3) + ")";
    $(".tf-attn-readout").textContent = k === null ? "Grid: row = query, column = key; point at a cell."
      : "query " + q + " " + text(q) + " \\u2192 key " + k + " " + text(k) + ": " + weight(l, h, q, k).toFixed(3);
  }

  const pick = (q, k = null) => { st.query = Math.max(0, Math.min(T - 1, q)); st.key = k; show(); };
  toks.forEach((t, i) => {
    t.addEventListener("pointerenter", () => pick(i));
    t.addEventListener("click", () => pick(i));  // a tap on a phone
  });
  const row = $(".tf-attn-toks");
  row.addEventListener("keydown", (e) => {  // one tab stop for the row; arrows move the query
    const step = {ArrowLeft: -1, ArrowRight: 1, Home: -T, End: T}[e.key];
    if (step) { e.preventDefault(); pick(st.query + step); }
  });
  const canvas = $(".tf-attn-grid");
  const cellAt = (e) => {
    const r = canvas.getBoundingClientRect(), at = (v, size) => Math.min(T - 1, Math.max(0, Math.floor(v / size * T)));
    pick(at(e.clientY - r.top, r.height), at(e.clientX - r.left, r.width));
  };
  canvas.addEventListener("pointermove", cellAt);
  canvas.addEventListener("click", cellAt);

  heads();
  show();
  $(".tf-attn-nojs").remove();
  root.querySelectorAll(".tf-attn-ui").forEach((e) => { e.hidden = false; });
  root.dataset.ready = "1";  // for tools/browser_check.py: the script ran
})();
"""


@dataclass(frozen=True)
class AttentionWidget:
    """The HTML of an attention viewer; Jupyter and MyST-NB show it through ``_repr_html_``."""

    html: str
    shape: tuple[int, int, int]  # (n_layer, n_heads, T)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:  # the text/plain output: short, and the same on every machine
        n_layer, n_heads, T = self.shape
        return f"AttentionWidget(n_layer={n_layer}, n_heads={n_heads}, T={T}, {len(self.html)} characters of HTML)"


def _check_patterns(patterns) -> np.ndarray:
    """``(n_layer, n_heads, T, T)`` finite weights in [0, 1], as a float array."""
    w = _as_array(patterns, "patterns")
    if w.ndim != 4 or w.shape[2] != w.shape[3]:
        hint = {5: "; for one sequence of a batch (n_layer, B, n_heads, T, T) pass patterns[:, b]",
                3: "; for one layer's heads pass patterns[None]"}.get(w.ndim, "")
        raise ValueError(f"patterns must be 4-D (n_layer, n_heads, T, T) with square T x T patterns, "
                         f"got shape {w.shape}{hint}")
    if w.size == 0:
        raise ValueError(f"patterns is empty (shape {w.shape})")
    if not np.isfinite(w).all():
        raise ValueError("patterns holds non-finite values (NaN or inf); pass the weights after the softmax")
    if w.min() < -1e-6 or w.max() > 1 + 1e-6:
        raise ValueError(f"patterns must be attention weights in [0, 1], got values from {w.min():.3g} to "
                         f"{w.max():.3g}; pass the weights after the softmax, not the scores")
    return w.clip(0.0, 1.0)


def _check_names(names, count: int, name: str, what: str) -> list[str]:
    """A list of ``count`` strings."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type(names).__name__}")
    if len(names) != count:
        raise ValueError(f"{name} has {len(names)} entries but patterns has {count} {what}")
    for n, s in enumerate(names):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{n}] must be a string, got {type(s).__name__}")
    return list(names)


def _head_titles(titles, n_layer: int, n_heads: int) -> list[list[str]]:
    """One list of head titles per layer: ``titles`` is one title per head (the same in every
    layer) or one such list per layer; None names them ``head 0``, ``head 1``, ..."""
    if titles is None:
        return [[f"head {h}" for h in range(n_heads)]] * n_layer
    if isinstance(titles, Sequence) and not isinstance(titles, str) and titles \
            and all(isinstance(t, Sequence) and not isinstance(t, str) for t in titles):
        if len(titles) != n_layer:
            raise ValueError(f"titles has {len(titles)} lists but patterns has {n_layer} layers; "
                             f"give one list of {n_heads} titles per layer, or one list for all layers")
        return [_check_names(t, n_heads, f"titles[{n}]", "heads") for n, t in enumerate(titles)]
    return [_check_names(titles, n_heads, "titles", "heads")] * n_layer


def _token_label(token: str) -> str:
    """What a token shows: line breaks and tabs as symbols, a token of spaces as ␣, nothing as ∅."""
    label = token.replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    if label.strip() == "":
        label = label.replace(" ", "␣") or "∅"
    return label


def _rows(w: np.ndarray) -> list:
    """The weights in thousandths, nested lists (layer, head, query, key), each row without its
    trailing zeros."""
    ints = np.rint(w * _WIDGET_SCALE).astype(int)
    out = []
    for layer in ints:
        out.append([])
        for head in layer:
            rows = []
            for row in head:
                nonzero = np.flatnonzero(row)
                rows.append(row[:nonzero[-1] + 1].tolist() if nonzero.size else [])
            out[-1].append(rows)
    return out


def _json_for_html(value) -> str:
    """JSON that can sit inside a <script> element: no "<", ">" or "&" characters at all, so no
    token or title can close the element ("</script>") or start a comment."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _widget_html(payload: str, spans: str) -> str:
    """The widget's page fragment around its data (JSON) and its token spans. Its one id comes
    from the content, numbered when this process shows the same content again (-2, -3, ...), so a
    notebook run from the top makes the same bytes on every machine and no two widgets share an id."""
    digest = hashlib.sha256((payload + spans).encode()).hexdigest()[:12]
    _widgets_made[digest] = _widgets_made.get(digest, 0) + 1
    uid = f"tf-attn-{digest}" + (f"-{_widgets_made[digest]}" if _widgets_made[digest] > 1 else "")
    return (
        f'<div class="tf-attn-widget tex2jax_ignore mathjax_ignore" id="{uid}">'  # no MathJax on tokens
        f"<style>{_WIDGET_CSS}</style>"
        '<p class="tf-attn-nojs tf-attn-note">An interactive view of the attention patterns: it needs JavaScript '
        "(in Jupyter, run the cell or trust the notebook).</p>"
        '<div class="tf-attn-ui" hidden>'  # the controls appear once the script runs
        '<div class="tf-attn-bar tf-attn-layers" role="group" aria-label="layer"><span>layer</span></div>'
        '<div class="tf-attn-bar tf-attn-heads" role="group" aria-label="head"><span>head</span></div>'
        '<p class="tf-attn-caption" aria-live="polite"></p>'
        '<p class="tf-attn-note">Point at or tap a token: each key is coloured by the weight it gets.</p>'
        "</div>"
        f'<div class="tf-attn-toks" tabindex="0" aria-label="tokens; arrow keys move the query">{spans}</div>'
        '<div class="tf-attn-ui" hidden><canvas class="tf-attn-grid" role="img" '
        'aria-label="heat grid of the selected head: row = query, column = key"></canvas>'
        '<p class="tf-attn-readout tf-attn-note"></p></div>'
        f'<script type="application/json" class="tf-attn-data">{payload}</script>'
        f"<script>{_WIDGET_JS.replace('__ID__', uid)}</script>"
        "</div>"
    )


def attention_widget(patterns, tokens: Sequence[str], *, titles: Sequence | None = None,
                     layer_names: Sequence[str] | None = None, layer: int = 0, head: int = 0,
                     query: int | None = None, width: int = 320) -> AttentionWidget:
    """An interactive view of every head's attention on one sequence, for a notebook or the book.

    patterns: ``(n_layer, n_heads, T, T)`` tensor or array of attention weights (row = query,
    column = key), e.g. ``tinyformer.interp.attention_patterns(model, idx)[:, 0]``.
    tokens: the ``T`` token strings, e.g. ``[tokenizer.decode([i]) for i in idx[0].tolist()]``.
    titles: a name per head (the same in every layer), or one list of names per layer.
    layer_names: a name per layer. layer, head, query: what is selected at first (query defaults to
    the last token, which sees the whole sequence). width: the heat grid's size in pixels at most.

    The reader picks a layer and a head with buttons (each head's shows its pattern in small),
    points at or taps a token to colour every key by the weight that token gives it, and points at
    the heat grid to read single weights. A cell ending in the call displays it (``_repr_html_``);
    the HTML is in ``.html``. It is self-contained (inline style and script, no network), is the
    same bytes for the same arguments in a fresh kernel (notebook outputs are compared by nbval;
    only a repeat within one kernel gets a numbered id), and says that it needs JavaScript where
    none runs. Raises ``TypeError`` or ``ValueError`` naming the argument.
    """
    w = _check_patterns(patterns)
    n_layer, n_heads, T, _ = w.shape
    tokens = _check_names(tokens, T, "tokens", "positions (T)")
    layer_names = [f"layer {n}" for n in range(n_layer)] if layer_names is None else \
        _check_names(layer_names, n_layer, "layer_names", "layers")
    heads = _head_titles(titles, n_layer, n_heads)
    layer = check_int("layer", layer, minimum=0)
    head = check_int("head", head, minimum=0)
    query = T - 1 if query is None else check_int("query", query, minimum=0)
    for name, value, bound in (("layer", layer, n_layer), ("head", head, n_heads), ("query", query, T)):
        if value >= bound:
            raise ValueError(f"{name} must be below {bound} (patterns has shape {w.shape}), got {value}")
    width = check_int("width", width, minimum=32)

    data = {"layers": layer_names, "heads": heads, "layer": layer, "head": head, "query": query,
            "causal": bool(np.all(np.triu(w, k=1) == 0)), "width": width, "thumb": 44,
            "rgb": _WIDGET_RGB, "scale": _WIDGET_SCALE, "w": _rows(w)}
    payload = _json_for_html(data)
    spans = "".join(f'<span class="tf-attn-tok" data-i="{i}">{html.escape(_token_label(t))}</span>'
                    for i, t in enumerate(tokens))
    return AttentionWidget(_widget_html(payload, spans), (n_layer, n_heads, T))


__all__ = ["FONT", "HEAD_COLOURS", "PART_COLOURS", "AttentionWidget", "add_node", "arrow", "attention_widget", "box",
           "cell_grid", "plot_attention", "plot_heads", "plot_history", "plot_per_layer", "schematic_axes"]
