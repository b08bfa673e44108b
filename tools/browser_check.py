"""Open every page of the built book in headless Chromium, as a phone and as a desktop.

    python tools/browser_check.py [html_dir]          (default: _build/html)

Each page is served from a local HTTP server and loaded at 1280 px and at 390 px wide, once
MathJax has typeset it. It fails when the page itself scrolls sideways (wide content must scroll
in its own box), when content is cut off by a box that hides its overflow, when a formula is left
as raw TeX or MathJax reports an error, when an image does not load or a figure's image has no
alt text, when code shows a grading marker or a solution is unfolded, when a local link points at
a missing file or anchor, or when a Colab, Binder or GitHub link points at a file that is not in
this repository. An interactive attention view (tinyformer.viz.attention_widget, class
tf-attn-widget) must have run its script, fit the window, and change what it shows when another
head is selected and a token is pointed at, and select a token that is tapped. On a Sphinx site
(one with objects.inv) the search page must answer a few queries from the built index alone, each
with a result on the page expected, loading nothing from outside the site. Problems are
printed one per line, with screenshots (the culprit outlined in red) under <html_dir>/../browser/,
and the exit status is 1. `-v` also prints, per page, how many boxes scroll sideways, which is
allowed.

The browser is Debian's `chromium` and the driver Debian's `chromium-driver` (or the paths in
$CHROMIUM and $CHROMEDRIVER); nothing is downloaded. Without them it says so and exits 1.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, unquote, urljoin, urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
# name -> (width, height, mobile): a desktop browser window and an iPhone-sized phone
WIDTHS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}
SKIP_SCHEMES = ("http:", "https:", "mailto:", "javascript:", "data:", "tel:", "ftp:")
MAX_SHOTS = 4  # screenshots per page and width
# queries the built book's search must answer offline, and a page each must find
SEARCHES = (("induction head", "book/10-interp.html"), ("byte-pair encoding", "book/06-training.html"),
            ("rotary", "book/04-positions.html"), ("notation", "book/appendix-notation.html"))
PAGE_TIMEOUT_S = 30  # to load a page and typeset its formulas


# --------------------------------------------------------------------------------------------
# The browser
# --------------------------------------------------------------------------------------------


class BrowserMissing(RuntimeError):
    pass


def find_browser() -> tuple[str, str]:
    """Paths of chromium and chromedriver, or BrowserMissing saying how to install them."""
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver))
               if not path or not os.access(path, os.X_OK)]
    if missing:
        raise BrowserMissing(
            f"{' and '.join(missing)} not found: install Debian's packages "
            "(`apt-get install -y chromium chromium-driver`) or set $CHROMIUM / $CHROMEDRIVER")
    try:
        import selenium  # noqa: F401
    except ImportError as err:
        raise BrowserMissing("the Python package selenium is not installed (pip install -r requirements.txt)") from err
    return chromium, driver


def start_browser(chromium: str, driver: str):
    """A headless Chromium driven through the given chromedriver. With the driver's path given,
    Selenium skips Selenium Manager, so nothing is looked up or downloaded."""
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-extensions", "--no-first-run", "--no-default-browser-check",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--force-device-scale-factor=1", "--window-size=1280,900", "--lang=en-US"):
        options.add_argument(flag)
    try:
        browser = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    except WebDriverException as err:
        raise BrowserMissing(f"could not start {chromium} with {driver}: {err.msg or err}") from err
    browser.set_page_load_timeout(PAGE_TIMEOUT_S)
    browser.set_script_timeout(PAGE_TIMEOUT_S)
    return browser


def set_width(browser, name: str) -> None:
    width, height, mobile = WIDTHS[name]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `folder` on a free local port in a background thread (fonts and scripts load as on the web)."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# --------------------------------------------------------------------------------------------
# What the page says about itself (run inside the browser)
# --------------------------------------------------------------------------------------------

# Waits for MathJax and the images, then returns the problems the page can see by itself.
# Each problem is [message, index of an element marked data-browser-check, or -1].
PAGE_SCRIPT = r"""
const [width, done] = [arguments[0], arguments[arguments.length - 1]];
(async () => {
  const problems = [];
  let marks = 0;
  const report = (message, el) => {
    let index = -1;
    if (el) { el.setAttribute('data-browser-check', marks); index = marks++; }
    problems.push([message, index]);
  };
  const where = (el) => {
    const s = el && el.closest('section[id]');
    return s ? ' (in #' + s.id + ')' : '';
  };
  const snippet = (el, n = 60) => {
    const t = (el.textContent || el.getAttribute('src') || '').replace(/\s+/g, ' ').trim();
    return t.length > n ? t.slice(0, n) + '…' : t;
  };
  const describe = (el) => {
    const cls = (el.getAttribute('class') || '').split(/\s+/).filter(Boolean).slice(0, 2).join('.');
    return '<' + el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (cls ? '.' + cls : '') + '>';
  };
  const style = (el) => getComputedStyle(el);
  const scrolls = (el) => /(auto|scroll)/.test(style(el).overflowX);
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && style(el).visibility !== 'hidden';
  };

  // MathJax: wait until it has typeset the page (and the page has fitted its formulas). MathJax
  // loads asynchronously, so poll: its startup promise may not exist yet, and a formula may still
  // be queued; give up (and report what is left) after about 10 s.
  const notMath = 'pre, code, script, style, textarea, mjx-container, .highlight, .tf-attn-widget';
  const rawTex = () => {
    const found = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!/\$\$|\\\(|\\\[|\\begin\{/.test(n.nodeValue) || !n.parentElement
          || n.parentElement.closest(notMath)) continue;
      found.push(n);
    }
    return found;
  };
  const hasMath = !!document.querySelector('.math, mjx-container') || rawTex().length > 0;
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  for (let attempt = 0; hasMath && attempt < 50; attempt++) {
    const mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise && mj.typesetPromise) {
      try {
        await mj.startup.promise;
        await mj.typesetPromise();  // whatever is still queued
      } catch (e) { report('MathJax failed: ' + e); break; }
      if (rawTex().length === 0) break;
    }
    await sleep(200);
  }
  if (hasMath && !(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    report('the page has formulas but MathJax did not start');
  }
  await new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)));
  const tex = new Map();
  try { for (const m of MathJax.startup.document.math) tex.set(m.typesetRoot, m.math); } catch (e) {}
  const texOf = (el) => {
    const c = el.closest('mjx-container');
    return ((c && tex.get(c)) || snippet(el)).replace(/\s+/g, ' ').trim().slice(0, 70);
  };
  for (const e of document.querySelectorAll('mjx-merror')) {
    report('MathJax error "' + (e.getAttribute('data-mjx-error') || snippet(e)) + '" in ' + texOf(e) + where(e), e);
  }
  for (const n of rawTex()) {
    report('formula left as raw TeX: ' + n.nodeValue.replace(/\s+/g, ' ').trim().slice(0, 70) + where(n.parentElement),
           n.parentElement);
  }

  // images load; a figure's image has a real alt text, not its file name
  await Promise.all([...document.images].map((img) => img.complete ? null :
    new Promise((ok) => { img.addEventListener('load', ok); img.addEventListener('error', ok); })));
  for (const img of document.images) {
    if (!img.naturalWidth) report('image did not load: ' + img.getAttribute('src') + where(img), img);
  }
  for (const img of document.querySelectorAll('figure img, .figure img')) {
    const alt = (img.getAttribute('alt') || '').trim();
    const file = (img.getAttribute('src') || '').split('/').pop();
    const named = /\.(png|jpe?g|svg|gif|webp)$/i.test(alt) && !/\s/.test(alt);
    if (!alt || alt === file || alt === img.getAttribute('src') || named) {
      report('figure image has no alt text (' + (alt || 'none') + ')' + where(img), img);
    }
  }

  // code shows no grading markers; solutions are folded (a closed <details>, or only the title shows)
  for (const pre of document.querySelectorAll('pre')) {
    if (/^\s*# (BEGIN|END) SOLUTION\s*$/m.test(pre.textContent)) {
      report('code shows a grading marker (# BEGIN/END SOLUTION)' + where(pre), pre);
    }
  }
  for (const s of document.querySelectorAll('.solution')) {
    const shown = (c) => !c.classList.contains('admonition-title') && c.getBoundingClientRect().height > 1 &&
      style(c).visibility !== 'hidden';
    const open = s.tagName === 'DETAILS' ? s.open : [...s.children].some(shown);
    const title = s.querySelector('.admonition-title, summary') || s;
    if (open) report('solution is not folded: ' + snippet(title) + where(s), s);
  }

  // the page itself never scrolls sideways: name the outermost elements that stick out
  const viewport = Math.min(window.innerWidth, width);
  const pageWidth = document.scrollingElement.scrollWidth;
  if (pageWidth > viewport + 1) {
    const culprits = [];
    for (const el of document.body.querySelectorAll('*')) {
      if (el.getBoundingClientRect().right <= viewport + 1 || !visible(el) || style(el).position === 'fixed') continue;
      if (el.closest('mjx-assistive-mml')) continue;
      const parent = el.parentElement;
      if (parent !== document.body && parent.getBoundingClientRect().right > viewport + 1) continue;
      let inScroller = false;
      for (let a = parent; a && a !== document.body; a = a.parentElement) if (scrolls(a)) { inScroller = true; break; }
      if (!inScroller) culprits.push(el);
    }
    if (!culprits.length) {  // text that overflows its own box (a <pre> that does not scroll, say)
      for (const el of document.body.querySelectorAll('*')) {
        if (el.getBoundingClientRect().left + el.scrollWidth <= viewport + 1 || !visible(el) || scrolls(el)) continue;
        if ([...el.children].some((c) => c.getBoundingClientRect().left + c.scrollWidth > viewport + 1)) continue;
        let inScroller = false;
        for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
          if (scrolls(a)) { inScroller = true; break; }
        }
        if (!inScroller) culprits.push(el);
      }
    }
    const names = culprits.slice(0, 3).map((el) =>
      describe(el) + ' "' + (el.closest('mjx-container') ? texOf(el) : snippet(el, 40)) + '"' + where(el));
    report('page is ' + pageWidth + ' px wide in a ' + viewport + ' px window; too wide: ' + (names.join('; ') || '?'),
           culprits[0]);
  }

  // nothing is cut off by a box that hides its overflow instead of scrolling it
  const article = document.querySelector('main, article, [role=main]') || document.body;
  for (const el of article.querySelectorAll('*')) {
    if (el.scrollWidth <= el.clientWidth + 2 || el.clientWidth < 20) continue;
    const cs = style(el);
    if (!/(hidden|clip)/.test(cs.overflowX) || cs.display === 'inline' || cs.display === 'contents') continue;
    if (el.tagName === 'MJX-ASSISTIVE-MML' || cs.clip !== 'auto' || cs.textOverflow === 'ellipsis') continue;
    if (!visible(el) || el.closest('.toggle-hidden, .visually-hidden, .sr-only, [aria-hidden=true]')) continue;
    const edge = el.getBoundingClientRect().right + 2;
    const cut = [...el.querySelectorAll('*')].find((c) =>
      c.getBoundingClientRect().right > edge && visible(c) && !c.closest('mjx-assistive-mml'));
    if (!cut) continue;
    const what = el.querySelector('mjx-container') ? texOf(el.querySelector('mjx-container')) : snippet(el);
    report(describe(el) + ' cuts off ' + (el.scrollWidth - el.clientWidth) + ' px of "' + what + '"' + where(el), el);
  }

  // for the verbose report: boxes that scroll sideways (allowed)
  const boxes = article.querySelectorAll('pre, mjx-container[display=true], .pst-scrollable-table-container, table');
  const scrollers = [...boxes].filter((el) => visible(el) && el.scrollWidth > el.clientWidth + 1 && scrolls(el)).length;

  const links = [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'));
  const ids = [...document.querySelectorAll('[id], a[name]')].map((e) => e.id || e.getAttribute('name'));
  done({problems, links, ids, scrollers, pageWidth});
})().catch((e) => done({problems: [['the check failed on this page: ' + e, -1]], links: [], ids: [],
                        scrollers: 0, pageWidth: 0}));
"""


# --------------------------------------------------------------------------------------------
# Interactive attention views (tinyformer.viz.attention_widget)
# --------------------------------------------------------------------------------------------

# what the check relies on: the root's class, its head buttons (aria-pressed marks the selected
# one), its tokens (tf-attn-q marks the selected query), and data-ready="1" once its script has run
WIDGET, WIDGET_HEADS, WIDGET_TOKENS, WIDGET_QUERY = (".tf-attn-widget", ".tf-attn-heads button", ".tf-attn-tok",
                                                     "tf-attn-q")
WIDGET_MARK = 10_000  # data-browser-check index of widget n is WIDGET_MARK + n, apart from PAGE_SCRIPT's marks

# where the widget lies, whether its script ran, and the colour behind each token: the weights shown
WIDGET_STATE = """
const w = arguments[0], r = w.getBoundingClientRect();
return {ready: w.getAttribute('data-ready') === '1', left: r.left, right: r.right, window: window.innerWidth,
        shown: [...w.querySelectorAll(arguments[1])].map((t) => getComputedStyle(t).backgroundColor).join(' ')};
"""


def widget_state(browser, widget) -> dict:
    return browser.execute_script(WIDGET_STATE, widget, WIDGET_TOKENS)


def changes_shown(browser, widget, actions) -> bool:
    """Run `actions` one at a time until the weights the widget shows change; whether they did.
    Trying several guards against heads (or queries) whose weights happen to be the same."""
    shown = widget_state(browser, widget)["shown"]
    for act in actions:
        act()
        if widget_state(browser, widget)["shown"] != shown:
            return True
    return False


def widget_problems(browser, width: int) -> list[tuple[str, int]]:
    """Use every attention widget on the loaded page as a reader would: its script has run, it fits
    the window, and selecting another head, pointing at a token and tapping one each change what it
    shows. Returns (message, mark) pairs like PAGE_SCRIPT's problems."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    def selected(token) -> bool:
        return WIDGET_QUERY in (token.get_attribute("class") or "").split()

    problems = []
    for n, widget in enumerate(browser.find_elements(By.CSS_SELECTOR, WIDGET), start=1):
        name, mark = f"attention widget {n}", WIDGET_MARK + n
        browser.execute_script("arguments[0].setAttribute('data-browser-check', arguments[1])", widget, mark)
        deadline = time.monotonic() + 1  # its script ran as the page was parsed: it should be ready already
        while not (state := widget_state(browser, widget))["ready"] and time.monotonic() < deadline:
            time.sleep(0.1)
        if not state["ready"]:
            problems.append((f'{name}: its script did not run (no data-ready="1" on .tf-attn-widget)', mark))
            continue
        window = min(state["window"], width)  # a phone's layout viewport grows to fit a page that is too wide
        if state["left"] < -1 or state["right"] > window + 1:
            problems.append((f"{name} sticks out of the {window} px window (from {state['left']:.0f} "
                             f"to {state['right']:.0f} px)", mark))
        others = [b for b in widget.find_elements(By.CSS_SELECTOR, WIDGET_HEADS)
                  if b.get_attribute("aria-pressed") != "true"]
        tokens = widget.find_elements(By.CSS_SELECTOR, WIDGET_TOKENS)
        T = len(tokens)
        points = [tokens[i] for i in dict.fromkeys((T // 2, 0, T // 4, 3 * T // 4)) if not selected(tokens[i])]
        try:
            if others and not changes_shown(browser, widget, [b.click for b in others]):
                problems.append((f"{name}: selecting another head did not change the highlighted weights", mark))
            if points and not changes_shown(browser, widget, [
                    lambda t=t: ActionChains(browser).move_to_element(t).perform() for t in points]):
                problems.append((f"{name}: pointing at a token did not change the highlighted weights", mark))
            if T > 1:  # tap a token, as on a phone: it becomes the query
                tap = tokens[-1] if not selected(tokens[-1]) else tokens[0]
                tap.click()
                if not selected(tap):
                    problems.append((f"{name}: tapping a token did not select it", mark))
        except WebDriverException as err:
            problems.append((f"{name}: could not use it: {(err.msg or str(err)).splitlines()[0]}", mark))
    return problems


# --------------------------------------------------------------------------------------------
# Links
# --------------------------------------------------------------------------------------------


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key == "id" or (tag == "a" and key == "name"):
                self.ids.add(value or "")


@functools.cache
def ids_in(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(errors="replace"))
    return frozenset(parser.ids)


def local_link_problem(href: str, page: Path, html_dir: Path, page_ids: set[str]) -> str | None:
    """Why a relative link of `page` is broken, or None."""
    if not href or href == "#" or href.lower().startswith(SKIP_SCHEMES) or href.startswith("//"):
        return None
    parts = urlsplit(href)
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if parts.path and target.is_dir():
        target = target / "index.html"
    if not target.exists():
        shown = target.relative_to(html_dir) if target.is_relative_to(html_dir) else target
        return f"broken link {href}: {shown} does not exist"
    anchor = unquote(parts.fragment)
    if anchor and target.suffix == ".html":
        known = page_ids | ids_in(page) if target == page else ids_in(target)
        if anchor not in known:
            return f"broken link {href}: no #{anchor} in {target.name}"
    return None


@dataclass
class Repo:
    root: Path
    owner: str
    name: str

    @classmethod
    def from_config(cls, root: Path) -> Repo:
        url = yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"].rstrip("/")
        owner, name = url.removeprefix("https://github.com/").split("/")[:2]
        return cls(root, owner, name)

    def path_of(self, url: str) -> tuple[str | None, bool]:
        """(file path in the repository that `url` opens or None, whether it is a launch link)."""
        parts = urlsplit(url)
        host, path = parts.netloc.lower(), unquote(parts.path)
        repo = f"/{self.owner}/{self.name}/"
        if host == "colab.research.google.com" and path.startswith("/github/"):
            m = re.match(r"/github/([^/]+)/([^/]+)/blob/[^/]+/(.+)", path)
            return (m.group(3) if m and f"/{m.group(1)}/{m.group(2)}/" == repo else ""), True
        if host == "mybinder.org" and "/v2/gh/" in path:
            m = re.match(r"/v2/gh/([^/]+)/([^/]+)/", path)
            if not m or f"/{m.group(1)}/{m.group(2)}/" != repo:
                return "", True
            query = parse_qs(parts.query)
            for key in ("labpath", "filepath", "urlpath"):
                if key in query:
                    value = re.sub(r"^(lab/)?(tree|notebooks)/", "", query[key][0].lstrip("/"))
                    return value, True
            return None, True
        if host == "github.com" and path.startswith(repo):
            m = re.match(r"/[^/]+/[^/]+/(?:blob|raw|edit|tree)/[^/]+/(.+)", path)
            return (m.group(1) if m else None), False
        if host == "raw.githubusercontent.com" and path.startswith(repo):
            m = re.match(r"/[^/]+/[^/]+/(?:refs/heads/)?[^/]+/(.+)", path)
            return (m.group(1) if m else None), False
        return None, False

    def link_problem(self, url: str) -> str | None:
        if not url.lower().startswith(("http:", "https:")):
            return None
        path, _launch = self.path_of(url)
        if path == "":
            return f"launch link {url} does not open this repository ({self.owner}/{self.name})"
        if path and not (self.root / path).exists():
            return f"link {url} opens {path}, which is not in the repository"
        return None


# --------------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------------


def book_pages(html_dir: Path) -> list[Path]:
    """Every HTML page of the book (not Sphinx's assets), redirect stubs left out."""
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir)
        if any(part.startswith("_") for part in rel.parts[:-1]):
            continue
        if re.match(r"\s*<meta http-equiv=\"refresh\"", path.read_text(errors="replace")[:300], re.I):
            continue
        pages.append(path)
    return pages


def redirect_problems(html_dir: Path) -> list[str]:
    problems = []
    for path in sorted(html_dir.glob("*.html")):
        m = re.match(r"\s*<meta http-equiv=\"refresh\" content=\"\d+;\s*url=([^\"]+)\"",
                     path.read_text(errors="replace")[:300], re.I)
        if m and not (path.parent / m.group(1).split("#")[0]).exists():
            problems.append(f"{path.name}: redirects to {m.group(1)}, which does not exist")
    return problems


# Polls Sphinx's search page until it reports that the search has finished (its summary line),
# then returns the result links and any resource the page loaded from outside the site.
SEARCH_SCRIPT = """
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  const summary = document.querySelector('#search-results .search-summary');
  if (summary || Date.now() - start > arguments[0] * 1000) {
    const links = Array.from(document.querySelectorAll('#search-results ul.search a'))
      .map(a => a.href.split('#')[0].split('?')[0]);
    const foreign = performance.getEntriesByType('resource').map(e => e.name)
      .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:'));
    done({finished: !!summary, links: links, foreign: foreign});
  } else setTimeout(poll, 100);
})();
"""


def search_problems(browser, base: str, html_dir: Path, searches=SEARCHES) -> list[str]:
    """Problems of the site's search: each query must find its page, from the local index only."""
    from urllib.parse import quote_plus

    if not (html_dir / "objects.inv").exists():  # not a Sphinx site: nothing to search
        return []
    if not (html_dir / "search.html").exists() or not (html_dir / "searchindex.js").exists():
        return ["search: the site has no search.html or no searchindex.js"]
    problems = []
    for query, expected in searches:
        browser.get(urljoin(base, f"search.html?q={quote_plus(query)}"))
        found = browser.execute_async_script(SEARCH_SCRIPT.replace("arguments[0]", str(PAGE_TIMEOUT_S)))
        if not found["finished"]:
            problems.append(f"search for {query!r} did not finish within {PAGE_TIMEOUT_S} s")
        elif urljoin(base, expected) not in found["links"]:
            problems.append(f"search for {query!r} does not find {expected} ({len(found['links'])} results)")
        problems += [f"search for {query!r} loaded {url} from outside the site" for url in found["foreign"]]
    return problems


def screenshot(browser, index: int, out: Path) -> None:
    """Scroll the marked element into view, outline it and save the window."""
    from selenium.webdriver.common.by import By

    out.parent.mkdir(parents=True, exist_ok=True)
    if index >= 0:
        els = browser.find_elements(By.CSS_SELECTOR, f'[data-browser-check="{index}"]')
        if els:
            browser.execute_script(
                "arguments[0].scrollIntoView({block: 'center', inline: 'nearest'});"
                "arguments[0].style.outline = '3px solid red';", els[0])
    browser.save_screenshot(str(out))


def load_and_inspect(browser, url: str, width: int) -> dict:
    """What PAGE_SCRIPT finds on the page at `url`; a page that does not settle is a problem."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        browser.get(url)
        # chromedriver can return from the first navigation before the page exists: wait for it
        WebDriverWait(browser, PAGE_TIMEOUT_S, poll_frequency=0.05).until(lambda b: b.execute_script(
            "return document.readyState === 'complete' && document.body !== null"
            " && location.href.split('#')[0] === arguments[0].split('#')[0]", url))
        return browser.execute_async_script(PAGE_SCRIPT, width)
    except TimeoutException:
        return {"problems": [[f"the page did not load and typeset within {PAGE_TIMEOUT_S} s", -1]],
                "links": [], "ids": [], "scrollers": 0, "pageWidth": 0}


def check(html_dir: Path, repo_root: Path = ROOT, shots: Path | None = None,
          verbose: bool = False, searches=SEARCHES) -> list[str]:
    """Load every page at every width; return the problems, one line each."""
    html_dir = html_dir.resolve()
    shots = shots or html_dir.parent / "browser"
    if shots.exists():
        shutil.rmtree(shots)
    repo = Repo.from_config(repo_root)
    chromium, driver = find_browser()
    pages = book_pages(html_dir)
    problems = redirect_problems(html_dir)
    if not pages:
        return problems + [f"no HTML pages under {html_dir}"]
    server, base = serve(html_dir)
    try:
        browser = start_browser(chromium, driver)
    except BrowserMissing:
        server.shutdown()
        server.server_close()
        raise
    try:
        for width in WIDTHS:
            set_width(browser, width)
            for page in pages:
                rel = page.relative_to(html_dir).as_posix()
                found = load_and_inspect(browser, urljoin(base, rel), WIDTHS[width][0])
                page_problems = [(msg, index) for msg, index in found["problems"]]
                page_problems += widget_problems(browser, WIDTHS[width][0])
                if width == next(iter(WIDTHS)):  # links do not depend on the width: check them once
                    for href in dict.fromkeys(found["links"]):
                        why = local_link_problem(href, page, html_dir, set(found["ids"])) or repo.link_problem(href)
                        if why:
                            page_problems.append((why, -1))
                if verbose:
                    print(f"  {rel} at {width}: {found['pageWidth']} px wide, "
                          f"{found['scrollers']} boxes scroll sideways, {len(page_problems)} problem(s)")
                shot_index = {}
                for msg, index in page_problems:
                    problems.append(f"{rel} at {WIDTHS[width][0]} px: {msg}")
                    if index not in shot_index and len(shot_index) < MAX_SHOTS:
                        shot_index[index] = shots / f"{Path(rel).stem}-{WIDTHS[width][0]}-{len(shot_index) + 1}.png"
                        screenshot(browser, index, shot_index[index])
        set_width(browser, next(iter(WIDTHS)))
        problems += search_problems(browser, base, html_dir, searches)
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", nargs="?", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("-v", "--verbose", action="store_true", help="print what each page measured")
    args = parser.parse_args(argv)
    if not args.html_dir.is_dir():
        print(f"browser_check: {args.html_dir} is not a folder (build the book first: make book)")
        return 1
    start = time.perf_counter()
    try:
        problems = check(args.html_dir, repo_root=ROOT, verbose=args.verbose)
    except BrowserMissing as err:
        print(f"browser_check: {err}")
        return 1
    for p in problems:
        print(p)
    shots = args.html_dir.resolve().parent / "browser"
    print(f"browser_check: {len(book_pages(args.html_dir))} pages × {len(WIDTHS)} widths in "
          f"{time.perf_counter() - start:.1f} s, {len(problems)} problem(s)"
          + (f"; screenshots in {shots}" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
