"""Chapter 5's schematic of the whole GPT: one column from token ids to logits, the tied matrix drawn
once beside it, and the decoding loop. Layout is checked with the renderer: every label inside the
axes and no two labels on top of each other."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from tinyformer.experiments.ch05 import draw_gpt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _drawn(ax):
    """Draw the figure; return the renderer and the texts that show something (arrows are
    annotations with empty text, whose extent is the arrow's)."""
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    return renderer, [t for t in ax.texts if t.get_text().strip() and t.get_visible()]


def _data_box(ax, patch):
    return patch.get_extents().transformed(ax.transData.inverted())


def _find(ax, fragment):
    found = [t for t in ax.texts if fragment in t.get_text()]
    assert len(found) == 1, (fragment, [t.get_text() for t in found])
    return found[0]


def test_returns_axes_of_the_size_the_layout_is_made_for():
    ax = draw_gpt()
    assert isinstance(ax, Axes)
    assert tuple(ax.figure.get_size_inches()) == pytest.approx((7.6, 6.4))
    assert not ax.axison


def test_draws_on_the_axes_it_is_given():
    fig, ax = plt.subplots(figsize=(7.6, 6.4))
    assert draw_gpt(ax=ax) is ax
    assert len(fig.axes) == 1


def test_tied_matrix_drawn_once_between_embedding_and_head():
    ax = draw_gpt()
    tied = [p for p in ax.patches if p.get_gid() == "tied"]
    assert len(tied) == 1
    box = _data_box(ax, tied[0])
    y_embed = _find(ax, "token embedding").get_position()[1]
    y_head = _find(ax, "LM head").get_position()[1]
    assert y_embed < box.y0 < box.y1 < y_head
    x_column = _find(ax, "transformer blocks").get_position()[0]
    assert box.x0 > x_column                  # beside the column, to the right
    assert box.x0 <= _find(ax, "one matrix").get_position()[0] <= box.x1


def test_column_runs_from_ids_up_to_sampling():
    ax = draw_gpt()
    order = ["token ids", "token embedding", "+ positions", "transformer blocks", "final layer norm",
             "LM head", "softmax"]
    ys = [_find(ax, label).get_position()[1] for label in order]
    assert ys == sorted(ys) and len(set(ys)) == len(ys)


def test_all_text_inside_the_axes():
    ax = draw_gpt()
    renderer, texts = _drawn(ax)
    frame = ax.get_window_extent(renderer)
    assert len(texts) >= 14
    for t in texts:
        box = t.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, t.get_text()
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1, t.get_text()


def test_no_two_labels_overlap():
    ax = draw_gpt()
    renderer, texts = _drawn(ax)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    clashes = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    assert not clashes


def test_box_labels_fit_inside_their_boxes():
    """Each label of the column and of the tied box lies within the rounded box drawn for it."""
    ax = draw_gpt()
    renderer, texts = _drawn(ax)
    boxes = [p.get_window_extent(renderer) for p in ax.patches]
    inside = 0
    for t in texts:
        x, y = ax.transData.transform(t.get_position())
        holders = [b for b in boxes if b.contains(x, y)]
        if not holders:
            continue                          # a label beside the column (shapes, notes)
        inside += 1
        tb = t.get_window_extent(renderer)
        assert any(b.x0 <= tb.x0 and tb.x1 <= b.x1 and b.y0 <= tb.y0 and tb.y1 <= b.y1
                   for b in holders), t.get_text()
    assert inside == 8                        # seven in the column, one in the tied box
