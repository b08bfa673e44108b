"""The GitHub workflows (.github/workflows) and their linter (tools/lint_workflows.py).

test.yml runs `make test` on every push and pull request; book.yml builds the book and publishes
it on GitHub Pages. The linter's tests break a copy of a workflow in one way each and check that
the linter meant to catch it does (skipped where the linters' binaries are not installed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
CLASSROOM = ROOT / "classroom" / ".github" / "workflows"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SHA_PIN = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")

spec = importlib.util.spec_from_file_location("lint_workflows", ROOT / "tools" / "lint_workflows.py")
lint_workflows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lint_workflows)


def load(name: str, folder: Path = WORKFLOWS) -> dict:
    data = yaml.safe_load((folder / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


TEST, BOOK = load("test.yml"), load("book.yml")
GRADE = load("grade.yml", CLASSROOM)


def steps(workflow: dict, job: str) -> list[dict]:
    return workflow["jobs"][job]["steps"]


def runs(workflow: dict, job: str) -> list[str]:
    return [s["run"] for s in steps(workflow, job) if "run" in s]


def uses(workflow: dict, job: str, action: str) -> dict:
    [step] = [s for s in steps(workflow, job) if s.get("uses", "").startswith(action + "@")]
    return step


# --------------------------------------------------------------------------------------------
# what the workflows do
# --------------------------------------------------------------------------------------------


def test_test_workflow_runs_make_test_on_every_push_and_pull_request():
    assert {"push", "pull_request"} <= set(TEST["on"])
    assert TEST["on"]["push"] is None and TEST["on"]["pull_request"] is None  # every branch
    [job] = TEST["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and 0 < job["timeout-minutes"] <= 90
    assert runs(TEST, "test")[-1] == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "make test"
    makefile = (ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^test: (.*)$", makefile, re.M)[1].split()
    assert {"lint", "workflows", "pytest", "nbval", "sync", "build", "html", "browser"} <= set(prerequisites)
    assert re.search(r"^\.PHONY: .*\bworkflows\b", makefile, re.M)


def test_python_and_torch_are_the_ones_the_pins_were_made_with():
    for workflow, job in ((TEST, "test"), (BOOK, "build")):
        setup = uses(workflow, job, "actions/setup-python")
        assert setup["with"]["python-version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
        # the Makefile's TORCH_INDEX (tests/test_launch.py checks how it is used), given to the
        # install step alone: a job-wide variable would reach `make test` and its tests too
        installs = [r for r in runs(workflow, job) if "install" in r.split()]
        assert installs == [f"make TORCH_INDEX={CPU_INDEX} install"]
        assert "TORCH_INDEX" not in str(workflow["jobs"][job].get("env", {}))


def test_the_venv_is_cached_on_the_pins():
    for workflow, job in ((TEST, "test"), (BOOK, "build")):
        cache = uses(workflow, job, "actions/cache")["with"]
        assert cache["path"] == ".venv"
        assert "hashFiles('requirements.txt', 'pyproject.toml')" in cache["key"]
        assert "steps.python.outputs.python-version" in cache["key"]  # a venv is tied to its interpreter
        names = [s.get("uses", s.get("run", "")).split("@")[0] for s in steps(workflow, job)]
        assert names.index("actions/cache") < names.index(f"make TORCH_INDEX={CPU_INDEX} install")


def test_book_workflow_builds_stored_outputs_and_deploys_to_pages():
    assert set(BOOK["on"]) == {"push", "workflow_dispatch"} and BOOK["on"]["push"] == {"branches": ["main"]}
    assert "make book" in runs(BOOK, "build") and "make html" in runs(BOOK, "build")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "off"  # `make book` renders the stored outputs
    assert "execute" not in re.search(r"^book:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M)[1]
    assert uses(BOOK, "build", "actions/upload-pages-artifact")["with"]["path"] == "_build/html"
    deploy = BOOK["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    assert BOOK["concurrency"] == {"group": "pages", "cancel-in-progress": False}


def test_the_site_is_published_from_the_branch_the_launch_buttons_open():
    """The Colab buttons open notebooks/ on the branch named in _config.yml; the site published
    from that branch serves copies at the same paths (`make html` checks them, tools/check_html.py)."""
    sys.path.insert(0, str(ROOT / "_ext"))
    import launch

    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert BOOK["on"]["push"]["branches"] == [repository["branch"]]
    chapters = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]-*.ipynb"))
    assert chapters
    for stem in chapters:
        path = f"{launch.READER_DIR}/{stem}.ipynb"
        url = launch.colab_url("https://colab.research.google.com", repository["url"], repository["branch"], path)
        assert url.endswith(f"/blob/{repository['branch']}/{path}") and (ROOT / path).is_file(), url


def test_least_privilege_and_concurrency():
    for workflow in (TEST, BOOK, GRADE):
        assert workflow["permissions"] == {"contents": "read"}
        assert "group" in workflow["concurrency"]
        for name, job in workflow["jobs"].items():
            assert job.get("timeout-minutes"), name
            assert job.get("permissions") in (None, {"pages": "write", "id-token": "write"}), name
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False
    assert [n for n, j in BOOK["jobs"].items() if "permissions" in j] == ["deploy"]
    assert all("permissions" not in j for j in TEST["jobs"].values())
    assert all("permissions" not in j for j in GRADE["jobs"].values())


def test_classroom_workflow_grades_with_make_grade_at_the_release_of_the_notebooks():
    from tinyformer import __version__

    assert GRADE["env"]["TINYFORMER_REF"] == f"v{__version__}"     # the tag the Colab bootstrap installs
    assert "push" in GRADE["on"]
    grader = [s for s in steps(GRADE, "grade") if s.get("with", {}).get("repository")]
    assert [s["with"]["repository"] for s in grader] == ["tinyformer/tinyformer"]
    assert grader[0]["with"]["ref"] == "${{ env.TINYFORMER_REF }}"
    assert grader[0]["with"]["path"] == "tinyformer"
    scripts = runs(GRADE, "grade")
    [grade] = [r for r in scripts if " grade " in r]
    assert grade.startswith("make -C tinyformer grade ") and 'OUT="$RUNNER_TEMP/grades"' in grade
    assert any("bubblewrap" in r for r in scripts)
    assert any('grades.md" >> "$GITHUB_STEP_SUMMARY"' in r for r in scripts)
    setup = uses(GRADE, "grade", "actions/setup-python")
    assert setup["with"]["python-version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r'^\t\$\(PY\) -m tinyformer.grade "\$\(DIR\)" --out "\$\(OUT\)"', makefile, re.M)


def test_every_action_is_pinned_to_a_commit_with_its_release():
    for path in sorted([*WORKFLOWS.glob("*.yml"), *CLASSROOM.glob("*.yml")]):
        lines = [ln.split("uses:", 1)[1].strip() for ln in path.read_text().splitlines() if "uses:" in ln]
        assert lines, path
        for ref in lines:
            assert SHA_PIN.match(ref), f"{path.name}: {ref}"


def test_nbval_shows_the_failing_cells_diff(tmp_path):
    """A notebook whose stored output no longer matches fails with both outputs in the log."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1,
                                          outputs=[nbformat.v4.new_output("stream", text="41\n")])]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "stale.ipynb"
    nbformat.write(nb, path)
    makefile = (ROOT / "Makefile").read_text()
    options = re.search(r"^nbval:.*\n\t\$\(VENV\)/bin/pytest (.*)$", makefile, re.M)[1]
    options = options.replace("$(BOOK_NOTEBOOKS)", str(path)).split()
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
                          *options], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout[-2000:]
    log = out.stdout
    # the cell's source, then the diff: the new output (-) against the stored one (+)
    assert "print(6 * 7)" in log, log[-3000:]
    assert re.search(r"^\s*- 42$", log, re.M) and re.search(r"^\s*\+ 41$", log, re.M), log[-3000:]


# --------------------------------------------------------------------------------------------
# the linter finds what it must, on broken copies
# --------------------------------------------------------------------------------------------

needs_linters = pytest.mark.skipif(
    not all(shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
            for name in ("actionlint", "zizmor", "shellcheck")),
    reason="actionlint, zizmor or shellcheck not installed (pip install -r requirements.txt)")

CHECKOUT = re.search(r"actions/checkout@\S+ # \S+", (WORKFLOWS / "test.yml").read_text())[0]
SETUP_PYTHON_INPUT = 'python-version: "3.11"'
MAKE_TEST_STEP = "      - name: make test\n"


def breakage(kind: str, text: str) -> str:
    """test.yml broken in one way; each replaced text must be there to be replaced."""
    replacements = {
        "syntax": (SETUP_PYTHON_INPUT, 'python-version: "3.11'),  # a quote never closed
        "unknown input": (SETUP_PYTHON_INPUT, 'python-versions: "3.11"'),
        "unpinned": (CHECKOUT, "actions/checkout@v6"),
        "untrusted input": (MAKE_TEST_STEP, "      - name: greet\n        run: echo "
                            '"${{ github.event.pull_request.title }}"\n\n' + MAKE_TEST_STEP),
    }
    old, new = replacements[kind]
    assert text.count(old) == 1, (kind, old)
    return text.replace(old, new)


def copies(folder: Path, kind: str | None) -> list[Path]:
    """book.yml and test.yml copied into folder, test.yml broken in one way (or not at all)."""
    folder.mkdir(parents=True)
    shutil.copy(WORKFLOWS / "book.yml", folder)
    text = (WORKFLOWS / "test.yml").read_text()
    (folder / "test.yml").write_text(breakage(kind, text) if kind else text)
    return [folder / "book.yml", folder / "test.yml"]


@needs_linters
def test_the_workflows_pass_the_linters(capsys):
    assert lint_workflows.main([]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out.splitlines()
    count = len(list(WORKFLOWS.glob("*.yml"))) + len(list(CLASSROOM.glob("*.yml")))
    assert count == 4
    assert out == [f"{name}: ok ({count} files)" for name in ("pins", "actionlint", "zizmor")]


@needs_linters
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("syntax", {"actionlint": "could not parse as YAML", "zizmor": "invalid YAML syntax"}),
        ("unknown input", {"actionlint": 'input "python-versions" is not defined in action "actions/setup-python'}),
        ("unpinned", {"zizmor": "unpinned-uses", "pins": "actions/checkout@v6 is not pinned to a full commit SHA"}),
        ("untrusted input", {"actionlint": '"github.event.pull_request.title" is potentially untrusted',
                             "zizmor": "template-injection"}),
    ],
)
def test_each_breakage_is_reported(tmp_path, capsys, kind, expected):
    files = copies(tmp_path / ".github" / "workflows", kind)
    checks = {"actionlint": lint_workflows.run_actionlint, "zizmor": lint_workflows.run_zizmor,
              "pins": lint_workflows.check_pins}
    for name, fragment in expected.items():
        report = "\n".join(checks[name](files))
        assert fragment in report, f"{name} missed the {kind} breakage:\n{report}"
        if name in ("actionlint", "pins"):  # one line per problem, at the broken line of test.yml
            [line] = [ln for ln in report.splitlines() if fragment in ln]
            number = int(line.split(":")[1])
            assert line.startswith(str(files[1])) and number > 1
    assert lint_workflows.main([str(f) for f in files]) == 1
    assert "FAILED" in capsys.readouterr().out


@needs_linters
def test_the_unbroken_copies_pass(tmp_path):
    """The breakages above are the only problems: the same copies, unbroken, are clean."""
    files = copies(tmp_path / ".github" / "workflows", None)
    assert lint_workflows.check_pins(files) == []
    assert lint_workflows.run_actionlint(files) == []
    assert lint_workflows.run_zizmor(files) == []


def test_tagged_copy_keeps_lines_and_only_rewrites_pinned_uses():
    text = ("steps:\n  - uses: actions/checkout@de0fac2e4500dabe0009e67214ff5f5447ce83dd # v6.0.2\n"
            "  - uses: ./local/action\n"
            "  - uses: actions/cache@0123456789abcdef0123456789abcdef01234567\n  - run: echo hi\n")
    copy = lint_workflows.tagged_copy(text)
    assert copy.splitlines() == ["steps:", "  - uses: actions/checkout@v6", "  - uses: ./local/action",
                                 "  - uses: actions/cache@0123456789abcdef0123456789abcdef01234567", "  - run: echo hi"]


def test_pins_check_names_each_offence(tmp_path):
    workflow = tmp_path / "w.yml"
    workflow.write_text(f"steps:\n  - uses: {CHECKOUT}\n  - uses: actions/setup-python@v6\n"
                        "  - uses: actions/cache@0123456789abcdef0123456789abcdef01234567\n"
                        "  - uses: './local/action'\n  - uses: docker://alpine:3\n")
    problems = lint_workflows.check_pins([workflow])
    assert len(problems) == 2
    assert problems[0].startswith(f"{workflow}:3: actions/setup-python@v6 is not pinned")
    assert problems[1].startswith(f"{workflow}:4: ") and "no release comment" in problems[1]


def test_missing_linter_is_a_clear_failure(monkeypatch, capsys):
    monkeypatch.setattr(lint_workflows.sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "")
    assert lint_workflows.main([]) == 2
    assert "actionlint not found" in capsys.readouterr().err
