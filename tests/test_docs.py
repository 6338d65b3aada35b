"""The README and docs/ cannot go stale: their commands run as written, their links resolve.

Every fenced ``bash`` and ``python`` block of README.md and docs/*.md runs, in the order of its
file, in a fresh folder per file that holds what docs/README.md says the examples start from:
``model.pnnx.param``/``.bin`` (the bundled EfficientNet-Lite0) and ``photos/`` (the bundled
photos). A bash block runs under ``bash -euo pipefail`` with this environment's ``kuiper`` and
``python`` first on the PATH; a python block runs on its own in a fresh interpreter. Blocks of
other types (``console``, ``text``, ``mermaid``) show output or pictures and are not run.

An HTML comment on the line before a block changes how it runs:

- ``<!-- docs: not run: REASON -->`` leaves it out; the reason says why (a cluster of machines,
  the test suite itself, a run of many minutes that a test of its own covers).
- ``<!-- docs: background until "TEXT" -->`` starts it and goes on once it printed TEXT (a
  server); it is stopped with SIGINT when the file's blocks have run, and must exit 0.
- ``<!-- docs: in a copy of the repository -->`` runs it in a fresh copy of the repository's
  tracked files instead (the README's Quick start, which sets up its own environment).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from kuiperinfer.models import efficientnet_lite0_path, sample_images

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_TYPES = ("bash", "python")
BLOCK_TIMEOUT_S = 900
README_MAX_WORDS = 1500

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`\n]*)$")
DIRECTIVE = re.compile(r"^<!-- docs: (?P<what>.*?) -->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its type, text, line and the directive before it (if any)."""

    path: Path
    line: int
    kind: str
    code: str
    directive: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start, fence = i, opening["fence"]
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(opening["indent"]):])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: a code block is never closed")
        previous = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        directive = DIRECTIVE.match(previous)
        found.append(Block(path, start + 1, opening["info"].strip().split(" ")[0], "\n".join(body) + "\n",
                           directive["what"] if directive else None))
        i += 1
    return found


def prose(path: Path) -> str:
    """A Markdown file without its code blocks (each its fences and ``code``'s lines)."""
    fenced = {line for block in blocks(path) for line in range(block.line, block.line + block.code.count("\n") + 2)}
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(text for number, text in enumerate(lines, 1) if number not in fenced)


def environment() -> dict[str, str]:
    """This interpreter's environment with its scripts (``kuiper``) first on the PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def starting_folder(folder: Path) -> Path:
    """What the examples start from: the bundled model as model.pnnx.param, photos/."""
    model = efficientnet_lite0_path()
    shutil.copy(model, folder / "model.pnnx.param")
    shutil.copy(model.with_suffix("").with_suffix(".pnnx.bin"), folder / "model.pnnx.bin")
    (folder / "photos").mkdir()
    for photo in sample_images():
        shutil.copy(photo, folder / "photos" / photo.name)
    return folder


def repository_copy(folder: Path) -> Path:
    """The repository's tracked files, as a fresh clone has them."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copy = folder / "repository"
    for name in filter(None, tracked.decode().split("\0")):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, copy / name)
    return copy


def command(block: Block) -> list[str]:
    if block.kind == "bash":
        return ["bash", "-euo", "pipefail", "-c", block.code]
    return [sys.executable, "-c", block.code]


def run_block(block: Block, folder: Path) -> None:
    result = subprocess.run(command(block), cwd=folder, env=environment(), capture_output=True, text=True,
                            timeout=BLOCK_TIMEOUT_S)
    assert result.returncode == 0, (
        f"{block.where}: the {block.kind} block exited {result.returncode}\n{block.code}\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")


class Background:
    """A block that keeps running (a server) while the blocks after it use it."""

    def __init__(self, block: Block, folder: Path, ready: str):
        self.block = block
        self.output: list[str] = []
        self.process = subprocess.Popen(command(block), cwd=folder, env=environment(), text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not self.ready.wait(120) or self.process.poll() is not None:
            self.stop()
            raise AssertionError(f"{block.where}: never printed {ready!r}\n{''.join(self.output)[-4000:]}")

    def _read(self, ready: str) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            if ready in line:
                self.ready.set()

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()


BACKGROUND = re.compile(r'^background until "(?P<ready>[^"]+)"$')


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_examples_run_as_written(path, tmp_path):
    folder = starting_folder(tmp_path)
    background: list[Background] = []
    try:
        for block in blocks(path):
            if block.kind not in RUN_TYPES:
                continue
            if block.directive is None:
                run_block(block, folder)
            elif block.directive.startswith("not run: ") and len(block.directive) > len("not run: "):
                continue
            elif match := BACKGROUND.match(block.directive):
                background.append(Background(block, folder, match["ready"]))
            elif block.directive == "in a copy of the repository":
                run_block(block, repository_copy(tmp_path))
            else:
                raise AssertionError(f"{block.where}: unknown directive {block.directive!r}")
    finally:
        codes = [(server, server.stop()) for server in background]
    for server, code in codes:
        assert code == 0, f"{server.block.where}: exited {code} when stopped\n{''.join(server.output)[-4000:]}"


LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """The anchors the forge gives a Markdown file's headings."""
    found = set()
    for line in prose(path).splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")
            found.add(slug)
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_links_resolve(path):
    broken = []
    for match in LINK.finditer(prose(path)):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{target}: no file {file}")
        elif file and linked == path:
            broken.append(f"{target}: links to itself by its path")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_short_and_keeps_the_quick_start():
    readme = ROOT / "README.md"
    words = len(readme.read_text(encoding="utf-8").split())
    assert words <= README_MAX_WORDS, f"README.md has {words} words, more than {README_MAX_WORDS}"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = next(line for line in ci.splitlines() if "python -m pytest" in line)
    quick_start = [block.code.strip() for block in blocks(readme) if block.kind == "bash"][:2]
    assert quick_start[1] == test_command, "the README's second Quick start command is what CI runs"
    assert quick_start[0].endswith("kuiper classify"), quick_start[0]


def test_every_document_is_reachable_from_the_readme():
    reached, todo = set(), [ROOT / "README.md"]
    while todo:
        path = todo.pop()
        if path in reached or not path.exists():
            continue
        reached.add(path)
        for match in LINK.finditer(prose(path)):
            file = match["target"].partition("#")[0]
            if file and not re.match(r"^[a-z]+:", file) and file.endswith(".md"):
                todo.append((path.parent / file).resolve())
    assert not set(DOCS) - reached, [str(p.relative_to(ROOT)) for p in set(DOCS) - reached]
