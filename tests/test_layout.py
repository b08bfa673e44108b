"""The library's house rules: the model library never imports the experiment scaffolding or the
course machinery, no module imports one that imports it back, every model module validates its
arguments through ``tinyformer.validation``, and the README's layout lists exactly the modules
that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "tinyformer"
MODEL_LIBRARY = ("attention", "blocks", "positions", "model", "sampling", "tokenizers", "data", "training",
                 "kvcache", "scaling", "lora", "interp", "setup", "validation")


def module_name(path: Path) -> str:
    parts = path.relative_to(LIB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(LIB.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Every tinyformer module ``path`` imports, at any depth of the file (function bodies too):
    ``from tinyformer.x import y`` counts as ``tinyformer.x.y`` when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in MODULES}
    return found


GRAPH = {name: imports(path) - {name} for name, path in MODULES.items()}


def test_the_graph_sees_known_edges():
    # the test must be able to fail: these edges exist, so a graph without them is wrong
    assert "tinyformer.validation" in GRAPH["tinyformer.model"]
    assert "tinyformer.experiments.toy" in GRAPH["tinyformer.experiments.ch03"]
    assert "tinyformer.course.reader" in GRAPH["tinyformer.course.student"]


@pytest.mark.parametrize("name", MODEL_LIBRARY)
def test_model_library_never_imports_scaffolding_or_course(name):
    bad = {m for m in GRAPH[f"tinyformer.{name}"]
           if m.startswith(("tinyformer.experiments", "tinyformer.course", "tinyformer.viz"))}
    assert not bad, f"tinyformer.{name} imports {sorted(bad)}"


def test_viz_imports_no_chapter():
    assert not {m for m in GRAPH["tinyformer.viz"] if m.startswith(("tinyformer.experiments", "tinyformer.course"))}


@pytest.mark.parametrize("name", [m for m in MODEL_LIBRARY if m != "validation"])
def test_every_model_module_validates_through_one_module(name):
    assert "tinyformer.validation" in GRAPH[f"tinyformer.{name}"]
    source = MODULES[f"tinyformer.{name}"].read_text(encoding="utf-8")
    moved = re.findall(r"^def (check_int|_check_bool|_check_eps|_check_std|_check_kv_heads|_require_ids|"
                       r"_require_vocab|_require_tensor|_check_features)\b", source, re.M)
    assert not moved, f"tinyformer.{name} defines {moved} again; they live in tinyformer.validation"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a package's ``__init__`` importing its own submodules is the
    normal pattern and not counted), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node], _ = 1, stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):          # a package importing its own submodule
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node], _ = 2, stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"p": {"p.x"}, "p.x": {"q"}, "q": set()}) is None


def test_import_graph_has_no_cycle():
    assert _cycle(GRAPH) is None, " -> ".join(_cycle(GRAPH))


def _readme_tree() -> set[str]:
    """The paths the README's library tree names (``experiments/ch02.py``, ``measured/``, …)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```\nlib/tinyformer/\n(.*?)```", text, re.S)
    assert block, "README.md has no ```lib/tinyformer/ tree"
    named, folder = set(), ""
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip())
        header = re.match(r"  (\w+)/:", line)
        if header:
            folder = header.group(1) + "/"
            named.add(folder)
            continue
        if indent == 2:
            folder = ""
        head = re.split(r"\s{2,}", line.strip())[0]  # the names; a description follows two spaces
        for name in re.findall(r"[\w]+\.(?:py|env)\b|\b\w+/", head):
            named.add(folder + name if indent >= 4 else name)
        named |= set(re.findall(r"\bnumerics\.env\b", line))
    return named


def test_readme_layout_lists_every_module_and_nothing_else():
    on_disk = {str(p.relative_to(LIB)) for p in LIB.rglob("*.py") if p.name != "__init__.py"}
    on_disk |= {str(p.relative_to(LIB)) + "/" for p in LIB.iterdir() if p.is_dir() and p.name != "__pycache__"}
    on_disk |= {p.name for p in LIB.glob("*.env")}
    listed = _readme_tree()
    assert not on_disk - listed, f"README's layout misses {sorted(on_disk - listed)}"
    assert not listed - on_disk, f"README's layout names what does not exist: {sorted(listed - on_disk)}"


def test_each_experiments_module_says_what_its_chapter_uses_it_for():
    for path in sorted((LIB / "experiments").glob("ch*.py")):
        number = int(path.stem[2:])
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and doc.startswith(f"Chapter {number} ("), f"{path.name} must open with 'Chapter {number} (…)'"
        chapter = next(ROOT.glob(f"book/{number:02d}-*.md"))
        assert f"tinyformer.experiments.ch{number:02d}" in chapter.read_text(encoding="utf-8") or \
            f"from tinyformer.experiments import ch{number:02d}" in chapter.read_text(encoding="utf-8"), \
            f"{chapter.name} never uses {path.name}"
