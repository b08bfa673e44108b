/* tinyformer: fit wide code and formulas into their boxes (see layout.css).
 * A code block whose longest line is a little too wide gets a smaller font, down to a readable
 * minimum; a display formula is scaled down to 70% at most, after its equation number has moved
 * above it if the two do not fit side by side; an inline formula wider than the line, to 80%.
 * What still does not fit scrolls inside its own box, with a shadow on the side that hides more.
 * Each pass reads all sizes first and writes afterwards, so a long page is laid out only a few
 * times. */
(() => {
  "use strict";
  const minCodePx = () => (window.innerWidth < 576 ? 12 : 11);
  const MIN_DISPLAY_SCALE = 0.7;
  const MIN_INLINE_SCALE = 0.8;
  const KEEP_NUMBER_BESIDE = 0.85; // scale at most this much before moving the number above

  function fitCode(root) {
    const blocks = [...root.querySelectorAll(".bd-article div.highlight pre")];
    for (const pre of blocks) if (pre.style.fontSize) pre.style.fontSize = "";
    const sizes = blocks.map((pre) => {
      if (!pre.clientWidth || pre.scrollWidth <= pre.clientWidth) return null;
      const style = getComputedStyle(pre);
      const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      const fitted = (parseFloat(style.fontSize) * (pre.clientWidth - padding)) / (pre.scrollWidth - padding);
      return Math.max(minCodePx(), Math.floor(fitted * 4) / 4);
    });
    blocks.forEach((pre, i) => { if (sizes[i]) pre.style.fontSize = sizes[i] + "px"; });
  }

  // MathJax sets each formula's font size (a percentage) inline; scale relative to that
  function scaleMath(container, scale) {
    if (!container.dataset.tfFontSize) container.dataset.tfFontSize = parseFloat(container.style.fontSize) || 100;
    container.style.fontSize = (container.dataset.tfFontSize * scale).toFixed(1) + "%";
    container.dataset.tfScaled = scale < 1 ? "1" : "";
  }

  function fitDisplayMath(root) {
    const formulas = [...root.querySelectorAll('.bd-article mjx-container[display="true"]')];
    for (const container of formulas) {
      if (container.dataset.tfScaled) scaleMath(container, 1);
      const math = container.closest("div.math");
      if (math) math.classList.remove("tf-eq-stacked");
    }
    const ratios = formulas.map((c) => (c.clientWidth ? c.clientWidth / c.scrollWidth : 1));
    formulas.forEach((container, i) => {
      let ratio = ratios[i];
      if (ratio >= 1) return;
      const math = container.closest("div.math");
      if (ratio < KEEP_NUMBER_BESIDE && math && math.querySelector(":scope > .eqno")) {
        math.classList.add("tf-eq-stacked"); // few formulas get here: reading again is cheap
        ratio = container.clientWidth / container.scrollWidth;
        if (ratio >= 1) return;
      }
      scaleMath(container, Math.max(MIN_DISPLAY_SCALE, ratio - 0.005));
    });
  }

  function fitInlineMath(root) {
    const spans = [...root.querySelectorAll(".bd-article span.math")].filter((s) => s.querySelector("mjx-container"));
    for (const span of spans) {
      const container = span.querySelector("mjx-container");
      if (container.dataset.tfScaled) scaleMath(container, 1);
      span.classList.remove("tf-math-scrolls");
    }
    const wide = spans.map((span) => {
      const room = span.clientWidth;
      const width = span.querySelector("mjx-container").getBoundingClientRect().width;
      return room && width > room + 1 ? room / width : null;
    });
    const scaled = spans.filter((span, i) => {
      if (wide[i] === null) return false;
      scaleMath(span.querySelector("mjx-container"), Math.max(MIN_INLINE_SCALE, wide[i] - 0.005));
      return true;
    });
    const still = scaled.filter((s) => s.querySelector("mjx-container").getBoundingClientRect().width > s.clientWidth + 1);
    for (const span of still) span.classList.add("tf-math-scrolls");
  }

  // the colour a box is drawn on: its ancestors' backgrounds, blended down to the first opaque one
  function backgroundOf(element) {
    const layers = [];
    for (let el = element.parentElement; el; el = el.parentElement) {
      const [r, g, b, a = 1] = (getComputedStyle(el).backgroundColor.match(/[\d.]+/g) || []).map(Number);
      if (r === undefined || a === 0) continue;
      layers.push([r, g, b, a]);
      if (a >= 1) break;
    }
    let colour = [255, 255, 255];
    for (const [r, g, b, a] of layers.reverse()) {
      colour = [r, g, b].map((c, i) => Math.round(c * a + colour[i] * (1 - a)));
    }
    return "rgb(" + colour.join(", ") + ")";
  }

  function markScrollers(root) {
    const boxes = [...root.querySelectorAll(
      '.bd-article mjx-container[display="true"], .bd-article .pst-scrollable-table-container')];
    const scrolling = boxes.map((box) => box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1);
    const colours = boxes.map((box, i) => (scrolling[i] ? backgroundOf(box) : ""));
    boxes.forEach((box, i) => {
      box.classList.toggle("tf-scrolls", scrolling[i]);
      if (scrolling[i]) box.style.setProperty("--tf-bg", colours[i]);
    });
  }

  const mathReady = () => window.MathJax && MathJax.startup && MathJax.startup.document;

  function fitAll(root = document) {
    fitCode(root);
    if (mathReady()) {
      fitDisplayMath(root);
      fitInlineMath(root);
    }
    markScrollers(root);
  }

  document.addEventListener("DOMContentLoaded", () => {
    fitCode(document);
    markScrollers(document);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(() => {
        fitDisplayMath(document);
        fitInlineMath(document);
        markScrollers(document);
      });
    }
    // the light/dark switch changes the colours behind the boxes
    new MutationObserver(() => markScrollers(document)).observe(document.documentElement,
      { attributes: true, attributeFilter: ["data-theme"] });
  });
  let pending = null;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(() => fitAll(), 150);
  });
  // folded content (hidden cell outputs) has no width until it is opened
  document.addEventListener("toggle", (event) => fitAll(event.target), true);

  // A link to a spot inside a folded box (a "Going further" dropdown, a folded cell) opens the
  // box and shows the spot: the glossary links to terms that some chapters define in such boxes.
  function revealTarget() {
    const id = decodeURIComponent(location.hash.slice(1));
    const target = id ? document.getElementById(id) : null;
    if (!target) return;
    let opened = false;
    for (let el = target.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS" && !el.open) {
        el.open = true;
        opened = true;
      }
      if (el.classList.contains("toggle-hidden")) {
        const button = el.querySelector(":scope > .admonition-title .toggle-button");
        if (button) {
          button.click();
          opened = true;
        }
      }
    }
    if (opened) target.scrollIntoView({ block: "center" });
  }
  // after the toggle buttons exist (sphinx-togglebutton adds them when the page has loaded)
  window.addEventListener("load", revealTarget);
  window.addEventListener("hashchange", revealTarget);
})();
