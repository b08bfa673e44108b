"""Chapter 4's schematic: absolute positions enter once, beside the input, and rotary positions
inside attention, on the queries and keys only."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tinyformer.experiments.ch04 import draw_position_paths  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _centres(ax, gid):
    """(x, y) centres of the patches drawn under ``gid``, left to right."""
    centres = []
    for p in ax.patches:
        if p.get_gid() == gid:
            box = p.get_extents().transformed(ax.transData.inverted())
            centres.append(((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2))
    return sorted(centres)


def _text_at(ax, x, y):
    """The texts whose anchor lies within 0.05 of (x, y)."""
    return [t.get_text() for t in ax.texts if abs(t.get_position()[0] - x) < 0.05
            and abs(t.get_position()[1] - y) < 0.05]


def test_new_figure_has_the_size_the_layout_is_made_for():
    ax = draw_position_paths()
    assert tuple(ax.figure.get_size_inches()) == pytest.approx((8.8, 5.4))
    assert not ax.axison


def test_draws_on_the_axes_it_is_given():
    fig, ax = plt.subplots()
    assert draw_position_paths(ax=ax) is ax


def test_one_position_box_left_two_right():
    ax = draw_position_paths()
    left, right = [], []
    for x, y in _centres(ax, "position"):
        (left if x < 4.4 else right).append((x, y))
    assert len(left) == 1 and len(right) == 2
    # absolute: the table sits beside the input, below the blocks
    blocks = _centres(ax, "blocks")
    left_blocks = [c for c in blocks if c[0] < 4.4]
    assert left[0][1] < left_blocks[0][1]
    # rotary: both rotations sit inside the attention box, at the same height
    right_block = [c for c in blocks if c[0] > 4.4][0]
    assert right[0][1] == pytest.approx(right[1][1])
    assert all(abs(y - right_block[1]) < 1.25 for _, y in right)


def test_the_rotations_act_on_q_and_k_not_v():
    ax = draw_position_paths()
    (xq, yq), (xk, yk) = _centres(ax, "position")[1:]
    assert any("rotate q" in t for t in _text_at(ax, xq, yq))
    assert any("rotate k" in t for t in _text_at(ax, xk, yk))
    labels = {t.get_text(): t.get_position() for t in ax.texts}
    x_v = labels["$W_V$"][0]
    assert x_v > xk > xq  # W_V stands apart, to the right, with no rotation above it
    assert not any(abs(x - x_v) < 0.3 for x, _ in _centres(ax, "position"))
