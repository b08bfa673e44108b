"""Chapter 3's figure: the block schematic puts each part where its norm placement says."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tinyformer.experiments.ch03 import draw_block  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _parts(ax, gid):
    """(x, y) centres of the patches drawn under ``gid``, bottom to top."""
    centres = []
    for p in ax.patches:
        if p.get_gid() == gid:
            box = p.get_extents().transformed(ax.transData.inverted())
            centres.append(((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2))
    return sorted(centres, key=lambda c: c[1])


def _stream_x(ax) -> float:
    (line,) = [ln for ln in ax.lines if ln.get_gid() == "stream"]
    xs = set(line.get_xdata())
    assert len(xs) == 1                                   # a vertical line
    return xs.pop()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_has_its_parts_in_order(norm):
    ax = draw_block(norm)
    sx = _stream_x(ax)
    lns, adds = _parts(ax, "ln"), _parts(ax, "add")
    (attn,), (ffn,) = _parts(ax, "attn"), _parts(ax, "ffn")
    assert len(lns) == 2 and len(adds) == 2
    assert attn[1] < adds[0][1] < ffn[1] < adds[1][1]    # attention first, each added back
    assert all(abs(a[0] - sx) < 1e-6 for a in adds)      # additions sit on the stream
    assert attn[0] > sx and ffn[0] > sx                  # sublayers branch off it
    if norm == "pre":                                    # a norm on each branch, before its sublayer
        assert all(ln[0] > sx + 0.5 for ln in lns)
        assert lns[0][1] < attn[1] and adds[0][1] < lns[1][1] < ffn[1]
    else:                                                # a norm on the stream, after each addition
        assert all(abs(ln[0] - sx) < 1e-6 for ln in lns)
        assert adds[0][1] < lns[0][1] < ffn[1] and adds[1][1] < lns[1][1]
    text = "\n".join(t.get_text() for t in ax.texts)
    assert f"{norm}-norm" in text and "ln_1" in text and "ln_2" in text
    assert all(t.get_fontsize() >= 9 for t in ax.texts)


def test_block_draws_on_a_given_axes_and_rejects_bad_norm():
    fig, ax = plt.subplots(figsize=(4.4, 6))
    assert draw_block("post", ax) is ax
    with pytest.raises(ValueError, match="norm must be 'pre' or 'post'"):
        draw_block("middle")
