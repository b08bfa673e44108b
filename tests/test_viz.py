"""Plotting helpers draw what they are given and refuse what they cannot draw."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tinyformer import viz  # noqa: E402
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


# --------------------------------------------------------------------------- interactive attention viewer


class _Parts(HTMLParser):
    """The pieces of a widget's HTML: each script's text, each token span's text, every id."""

    def __init__(self, page: str):
        super().__init__()
        self.scripts, self.tokens, self.ids, self._in = [], [], [], None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "script":
            self._in = "script"
            self.scripts.append("")
        elif tag == "span" and a.get("class") == "tf-attn-tok":
            self._in = "token"
            self.tokens.append("")

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "token":
            self.tokens[-1] += data


def _widget_data(page: str) -> dict:
    return json.loads(_Parts(page).scripts[0])


def _patterns(n_layer=2, n_heads=4, T=32, seed=0):
    scores = 3 * torch.randn(n_layer, n_heads, T, T, generator=torch.Generator().manual_seed(seed))
    return softmax(scores.masked_fill(~causal_mask(T), float("-inf")))


@pytest.fixture
def fresh_ids(monkeypatch):
    """Forget the widgets made so far, as in a new kernel (a repeat of the same content is numbered)."""
    monkeypatch.setattr(viz, "_widgets_made", {})


def test_widget_is_the_same_bytes_for_the_same_input(fresh_ids):
    w, tokens = _patterns(), [f"t{i}" for i in range(32)]
    first = viz.attention_widget(w, tokens, titles=["a", "b", "c", "d"]).html
    viz._widgets_made.clear()
    assert viz.attention_widget(w.clone().numpy(), list(tokens), titles=["a", "b", "c", "d"]).html == first
    # and in another Python process (the stored notebook output and nbval's rerun)
    code = ("import torch; from tinyformer import viz; from tinyformer.attention import causal_mask, softmax\n"
            "s = 3 * torch.randn(2, 4, 32, 32, generator=torch.Generator().manual_seed(0))\n"
            "w = softmax(s.masked_fill(~causal_mask(32), float('-inf')))\n"
            "print(viz.attention_widget(w, [f't{i}' for i in range(32)], titles=['a', 'b', 'c', 'd']).html, end='')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == first


def test_widget_ids_are_unique_per_widget(fresh_ids):
    w, tokens = _patterns(T=5), list("abcde")
    pages = [viz.attention_widget(w, tokens).html, viz.attention_widget(w, tokens).html,
             viz.attention_widget(w, tokens, head=1).html]
    ids = [_Parts(p).ids for p in pages]
    assert all(len(i) == 1 for i in ids)  # the root's id is the only one
    assert len({i[0] for i in ids}) == 3 and ids[1][0] == ids[0][0] + "-2"
    assert pages[1] == pages[0].replace(ids[0][0], ids[1][0])


def test_widget_is_self_contained_and_small():
    widget = viz.attention_widget(_patterns(), [f"t{i}" for i in range(32)])
    page = widget.html
    assert widget._repr_html_() == page and repr(widget).startswith("AttentionWidget(n_layer=2, n_heads=4, T=32")
    for remote in ("http:", "https:", "//cdn", "src=", "href=", "@import", "url("):
        assert remote not in page.lower(), remote
    assert len(page.encode()) < 40_000  # about 21 kB for 2 layers x 4 heads x 32 tokens
    assert "needs JavaScript" in page  # what a reader without JavaScript sees, until the script removes it


def test_widget_data_round_trips_to_the_weights():
    w = _patterns(n_layer=3, n_heads=2, T=9)
    data = _widget_data(viz.attention_widget(w, list("abcdefghi"), layer=2, head=1, query=4).html)
    shown = np.zeros(w.shape)
    for l, layer in enumerate(data["w"]):
        for h, head in enumerate(layer):
            for i, row in enumerate(head):
                shown[l, h, i, :len(row)] = np.array(row) / data["scale"]
    np.testing.assert_allclose(shown, w.numpy(), atol=5e-4)
    assert (data["layer"], data["head"], data["query"], data["causal"]) == (2, 1, 4, True)
    assert data["layers"] == ["layer 0", "layer 1", "layer 2"] and data["heads"][0] == ["head 0", "head 1"]


def test_widget_escapes_tokens_and_titles():
    nasty = ["</script>", "<b>bold</b>", "&amp;", '"', "'", "</SCRIPT >", "<!--", "\u2028"]
    title = "</script><script>alert(1)</script>"
    page = viz.attention_widget(_patterns(T=len(nasty)), nasty, titles=[title, "&", "<", ">"]).html
    parts = _Parts(page)
    assert len(parts.scripts) == 2 and len(re.findall(r"</script", page, re.I)) == 2  # only the widget's own
    assert parts.tokens == nasty  # shown as written
    assert _widget_data(page)["heads"][0][0] == title  # the JSON still parses and holds the title
    assert "alert(1)</script>" not in page


def test_widget_shows_whitespace_tokens():
    parts = _Parts(viz.attention_widget(_patterns(T=4), [" ", "\n", "", " a"]).html)
    assert parts.tokens == ["␣", "↵", "∅", " a"]


def test_widget_titles_per_layer():
    data = _widget_data(viz.attention_widget(_patterns(n_layer=2, n_heads=2, T=3), list("abc"),
                                             titles=[["prev", "self"], ["induction", "other"]],
                                             layer_names=["L0", "L1"]).html)
    assert data["heads"] == [["prev", "self"], ["induction", "other"]] and data["layers"] == ["L0", "L1"]


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(patterns=torch.ones(4, 4) / 4), ValueError, r"patterns must be 4-D \(n_layer, n_heads, T, T\)"),
    (dict(patterns=torch.ones(2, 1, 3, 4, 4) / 4), ValueError, r"pass patterns\[:, b\]"),
    (dict(patterns=torch.ones(1, 1, 4, 3) / 3), ValueError, "square"),
    (dict(patterns="weights"), TypeError, "patterns must be a tensor or array"),
    (dict(patterns=torch.full((1, 1, 4, 4), float("nan"))), ValueError, "patterns holds non-finite"),
    (dict(patterns=torch.randn(1, 1, 4, 4) * 5), ValueError, r"patterns must be attention weights in \[0, 1\]"),
    (dict(tokens=list("abc")), ValueError, r"tokens has 3 entries but patterns has 4 positions \(T\)"),
    (dict(tokens="abcd"), TypeError, "tokens must be a list of strings"),
    (dict(tokens=["a", 1, "c", "d"]), TypeError, r"tokens\[1\] must be a string"),
    (dict(titles=["a", "b"]), ValueError, "titles has 2 entries but patterns has 3 heads"),
    (dict(titles=[["a", "b", "c"]]), ValueError, "titles has 1 lists but patterns has 2 layers"),
    (dict(titles=[["a", "b", "c"], ["a"]]), ValueError, r"titles\[1\] has 1 entries"),
    (dict(layer_names=["only"]), ValueError, "layer_names has 1 entries but patterns has 2 layers"),
    (dict(layer=2), ValueError, "layer must be below 2"),
    (dict(head=-1), ValueError, "head must be at least 0"),
    (dict(query=1.5), TypeError, "query must be an integer"),
    (dict(width=8), ValueError, "width must be at least 32"),
])
def test_widget_rejects_bad_input(kwargs, error, match):
    args = dict(patterns=_patterns(n_layer=2, n_heads=3, T=4), tokens=list("abcd")) | kwargs
    with pytest.raises(error, match=match):
        viz.attention_widget(args.pop("patterns"), args.pop("tokens"), **args)
