"""Plotting helpers draw what they are given and refuse what they cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from tinyformer.attention import causal_mask, softmax, split_heads  # noqa: E402
from tinyformer.viz import draw_head_dataflow, draw_split_heads, plot_attention, plot_heads  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(T=4, H=None):
    shape = (T, T) if H is None else (H, T, T)
    scores = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    return softmax(scores.masked_fill(~causal_mask(T), float("-inf")))


def test_heatmap_shows_the_weights_and_labels():
    w = _weights()
    ax = plot_attention(w, ["a", "b", "c", "d"], annotate=True)
    np.testing.assert_allclose(ax.images[0].get_array(), w.numpy(), rtol=1e-6)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert len(ax.texts) == int((w >= 0.005).sum())  # masked (zero) cells carry no number


def test_cross_attention_needs_key_labels():
    w = torch.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="key_tokens"):
        plot_attention(w, ["q1", "q2"])
    ax = plot_attention(w, ["q1", "q2"], key_tokens=["k1", "k2", "k3"], colorbar=False)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["k1", "k2", "k3"]


@pytest.mark.parametrize(("weights", "tokens", "error", "match"), [
    (torch.ones(2, 2, 2), None, ValueError, "2-D"),
    (torch.ones(3, 3), ["a", "b"], ValueError, "tokens has 2 labels"),
    (torch.ones(3, 3), "abc", TypeError, "list of strings"),
    ("not numbers", None, TypeError, "weights must be"),
])
def test_plot_attention_rejects_bad_input(weights, tokens, error, match):
    with pytest.raises(error, match=match):
        plot_attention(weights, tokens)


def test_plot_heads_draws_one_panel_per_head():
    w = _weights(T=3, H=2)
    fig = plot_heads(w, ["x", "y", "z"], titles=["prev", "self"])
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["prev", "self"]
    for h, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), w[h].numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="3-D"):
        plot_heads(w[0])
    with pytest.raises(ValueError, match="titles has 1 labels"):
        plot_heads(w, titles=["only one"])


# --------------------------------------------------------------------------- schematics


def _texts(ax) -> str:
    return "\n".join(t.get_text() for t in ax.texts)


def _cells(ax, gid: str) -> list:
    """The matrix cells drawn under ``gid``, in drawing order (row by row)."""
    return [p for p in ax.patches if p.get_gid() == gid]


def _fill(patch) -> tuple:
    return tuple(round(c, 4) for c in patch.get_facecolor())


def test_head_dataflow_draws_every_stage_with_its_shape():
    ax = draw_head_dataflow()
    text = _texts(ax)
    for label in ("$x$", "W_Q", "W_K", "W_V", "(T, $d_k$)", "(T, $d_v$)", "(T, $d_\\mathrm{model}$)",
                  "sqrt{d_k}", "causal mask", "softmax", "weights (T, T)", "output = weights · v"):
        assert label in text, label
    assert {p.get_gid() for p in ax.patches} >= {"x", "q", "k", "v", "stage", "output", "matrix"}
    assert all(t.get_fontsize() >= 9 for t in ax.texts)          # readable on a phone
    width, _ = ax.figure.get_size_inches()
    assert 8 <= width <= 9.5


@pytest.mark.parametrize("T", [2, 4, 6])
def test_head_dataflow_masks_the_future_and_zeroes_its_weights(T):
    ax = draw_head_dataflow(T=T)
    cells = _cells(ax, "matrix")
    assert len(cells) == 3 * T * T                                 # scores, mask, weights
    scores, masked, weights = (cells[n * T * T:(n + 1) * T * T] for n in range(3))
    future = ~causal_mask(T)                                       # key j > query i
    for idx in range(T * T):
        i, j = divmod(idx, T)
        if future[i, j]:
            assert _fill(masked[idx]) == _fill(masked[1])          # all hidden cells look the same
            assert _fill(weights[idx]) == to_rgba("white")         # zero weight
        else:
            assert _fill(masked[idx]) == _fill(scores[idx])        # allowed scores pass unchanged
            assert _fill(weights[idx]) != to_rgba("white")


def test_head_dataflow_draws_on_a_given_axes_and_rejects_bad_T():
    fig, ax = plt.subplots(figsize=(9, 4.3))
    assert draw_head_dataflow(ax) is ax
    with pytest.raises(TypeError, match="T must be an integer"):
        draw_head_dataflow(T=3.0)
    with pytest.raises(ValueError, match="T must be at least 2"):
        draw_head_dataflow(T=1)
    with pytest.raises(ValueError, match="at most 8"):
        draw_head_dataflow(T=9)


@pytest.mark.parametrize(("n_heads", "d_head", "T"), [(3, 2, 4), (2, 3, 3), (4, 3, 2)])
def test_split_heads_colours_match_the_librarys_split(n_heads, d_head, T):
    """Head h's panel has the colour of exactly the columns that split_heads hands to head h."""
    ax = draw_split_heads(n_heads=n_heads, d_head=d_head, T=T)
    d_model = n_heads * d_head
    projection, heads = _cells(ax, "projection"), _cells(ax, "head")
    assert len(projection) == T * d_model and len(heads) == n_heads * T * d_head
    column_colour = [_fill(projection[c]) for c in range(d_model)]     # first row, left to right
    columns = torch.arange(d_model, dtype=torch.float64).expand(T, d_model)     # (T, d_model): column ids
    columns_of_head = split_heads(columns, n_heads)[:, 0].long()        # (n_heads, d_head)
    for h in range(n_heads):
        panel = heads[h * T * d_head:(h + 1) * T * d_head]
        assert len({_fill(c) for c in panel}) == 1                    # one colour per head
        owned = [c for c in range(d_model) if column_colour[c] == _fill(panel[0])]
        assert owned == columns_of_head[h].tolist()                   # contiguous: h·d_head ... (h+1)·d_head-1
    # the merge lays the heads side by side again, in the same order
    assert [_fill(c) for c in _cells(ax, "merged")[:d_model]] == column_colour
    assert len(_cells(ax, "output")) == T * d_model


def test_split_heads_labels_and_bad_input():
    ax = draw_split_heads()
    text = _texts(ax)
    for label in ("reshape", "transpose", "concatenate", "W_O", "head 0", "head 2", "attend",
                  "(T, $n_\\mathrm{heads}$, $d_\\mathrm{head}$)"):
        assert label in text, label
    assert all(t.get_fontsize() >= 9 for t in ax.texts)
    width, _ = ax.figure.get_size_inches()
    assert 8 <= width <= 9.5
    with pytest.raises(ValueError, match="n_heads must be at least 1"):
        draw_split_heads(n_heads=0)
    with pytest.raises(TypeError, match="d_head must be an integer"):
        draw_split_heads(d_head=2.5)
    with pytest.raises(ValueError, match="readable"):
        draw_split_heads(n_heads=4, d_head=4)
