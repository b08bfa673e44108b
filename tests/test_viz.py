"""Plotting helpers draw what they are given and refuse what they cannot draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tinyformer.attention import causal_mask, softmax  # noqa: E402
from tinyformer.viz import plot_attention, plot_heads, plot_per_layer  # noqa: E402


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


# --------------------------------------------------------------------------- per-layer curves


def test_plot_per_layer_draws_the_values():
    curves = {"a": [1.0, 10.0, 100.0], "b": torch.tensor([2.0, 3.0])}
    ax = plot_per_layer(curves, ylabel="size", start=1)
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "size"
    (la, lb) = ax.lines
    np.testing.assert_array_equal(la.get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(la.get_ydata(), [1.0, 10.0, 100.0])
    np.testing.assert_array_equal(lb.get_ydata(), [2.0, 3.0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert plot_per_layer({"c": [1, 2]}, log=False).get_yscale() == "linear"


def test_plot_per_layer_labels_a_narrow_log_range_with_plain_numbers():
    narrow = plot_per_layer({"a": [1.0, 4.9]})
    assert narrow.yaxis.get_major_formatter()(1.0, 0) == "1"
    assert narrow.yaxis.get_minor_formatter()(2.0, 0) == "2"
    assert narrow.yaxis.get_minor_formatter()(4.0, 0) == ""
    wide = plot_per_layer({"a": [1e-20, 1e3]})          # many decades: powers of ten as usual
    assert wide.yaxis.get_major_formatter()(1e-20, 0) != "1e-20"


@pytest.mark.parametrize(("curves", "error", "match"), [
    ({}, TypeError, "non-empty dict"),
    ([1, 2], TypeError, "non-empty dict"),
    ({"a": [[1, 2]]}, ValueError, "must be 1-D"),
])
def test_plot_per_layer_rejects_bad_input(curves, error, match):
    with pytest.raises(error, match=match):
        plot_per_layer(curves)
