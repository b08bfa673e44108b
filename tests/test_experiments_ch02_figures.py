"""Chapter 2's schematics: one head's dataflow and the split-heads reshape draw what the library computes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from tinyformer.attention import causal_mask, split_heads  # noqa: E402
from tinyformer.experiments.ch02 import draw_head_dataflow, draw_split_heads  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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


@pytest.mark.parametrize(("n_heads", "d_head"), [(3, 2), (4, 3)])
def test_split_heads_stages_never_overlap(n_heads, d_head):
    """Each stage sits left of the next, and the reshaped heads sit side by side without touching."""
    ax = draw_split_heads(n_heads=n_heads, d_head=d_head, T=4)
    to_data = ax.transData.inverted()

    def span(cells):
        boxes = [c.get_extents().transformed(to_data) for c in cells]
        return min(b.x0 for b in boxes), max(b.x1 for b in boxes)

    stages = [span(_cells(ax, gid)) for gid in ("projection", "reshaped", "head", "merged", "output")]
    for (_, right), (left, _) in zip(stages, stages[1:]):
        assert right < left
    reshaped, per_head = _cells(ax, "reshaped"), 4 * d_head
    blocks = [span(reshaped[h * per_head:(h + 1) * per_head]) for h in range(n_heads)]
    for (_, right), (left, _) in zip(blocks, blocks[1:]):
        assert right < left
