"""The documentation's Python examples run as written, and its links resolve.

Every ```python block of README.md and docs/*.md runs, page by page, in order:

- a block whose first line starts with `%` is a notebook cell: a page's cells run
  in one in-process IPython shell with gpucache_ext loaded (the `ip` fixture);
- a block whose first line is `# ipython_config.py` is an IPython profile's config
  file: traitlets loads it as IPython does, and every setting must be a
  configurable trait of the class it names, with a value that trait accepts;
- any other block is a script: it runs as `__main__` in a fresh namespace, from a
  file (so numba and `inspect` see its source), with a fresh default cache.

No GPU is needed: the examples give their targets (scripts that give none get
GPUCACHE_SM=86), and without a GPU kernels launch on numba's simulator. Output
blocks (```text, or a plain ```) are not run. A block right after a
`<!-- not run: REASON -->` comment is left out; such blocks must be few, and
each must say why.
"""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path

import pytest

from gpucache_ext import defaults

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->", re.S)
MAX_NOT_RUN = 3


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based, the line of the opening fence
    end: int  # and of the closing one
    lang: str
    code: str
    not_run: str | None  # the reason given in a `<!-- not run: ... -->` right before it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"

    @property
    def kind(self) -> str:
        first = next((line for line in self.code.splitlines() if line.strip()), "")
        if first.startswith("%"):
            return "cell"
        if first.strip() == "# ipython_config.py":
            return "config"
        return "script"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, each with the `not run` reason
    of a comment that directly precedes it (blank lines between are allowed)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match.group(1), match.group(2).lower()
        closing = re.compile(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*")  # as long or longer
        end = i + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: a code block that is never closed"
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        reason = NOT_RUN.fullmatch(before)
        found.append(Block(page, i + 1, end + 1, lang, "\n".join(lines[i + 1:end]) + "\n",
                           reason.group(1) if reason else None))
        i = end + 1
    return found


def python_blocks(pages=PAGES) -> list[Block]:
    return [block for page in pages for block in blocks(page) if block.lang == "python"]


# -- running the examples -------------------------------------------------------


def run_cell(ip, block: Block) -> None:
    result = ip.run_cell(block.code)
    if not result.success:
        raise result.error_before_exec or result.error_in_exec


def run_config(block: Block, folder: Path) -> None:
    from IPython.core.shellapp import InteractiveShellApp
    from traitlets import HasTraits
    from traitlets.config.loader import PyFileConfigLoader

    from gpucache_ext.ipython.magic import GpuCacheMagics

    configurable = {cls.__name__: cls for cls in (GpuCacheMagics, InteractiveShellApp)}
    (folder / "ipython_config.py").write_text(block.code)
    config = PyFileConfigLoader("ipython_config.py", path=str(folder)).load_config()
    assert config, "the config file sets nothing"
    for section, settings in config.items():
        assert section in configurable, f"{section} is not a class this project configures"
        traits = configurable[section].class_traits(config=True)
        for name, value in settings.items():
            assert name in traits, f"{section}.{name} is not a configurable setting"
            traits[name].validate(HasTraits(), value)  # raises TraitError for a value it refuses


def run_script(block: Block, folder: Path) -> None:
    path = folder / f"{block.page.stem}_{block.line}.py"
    path.write_text(block.code)
    defaults._default_cache = None  # each script starts with a fresh default cache (outside IPython)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        defaults._default_cache = None


def run_page(page_blocks: list[Block], folder: Path, shell=None) -> int:
    """Run the page's Python blocks in order; return how many ran. `shell`
    gives the IPython shell for notebook cells (called at the first cell)."""
    ran = 0
    for block in page_blocks:
        if block.lang != "python" or block.not_run is not None:
            continue
        try:
            if block.kind == "cell":
                run_cell(shell(), block)
            elif block.kind == "config":
                run_config(block, folder)
            else:
                run_script(block, folder)
        except (Exception, SystemExit) as exc:
            raise AssertionError(f"{block.where}: the {block.kind} example fails: {exc!r}") from exc
        ran += 1
    return ran


PAGES_WITH_PYTHON = [page for page in PAGES if any(b.lang == "python" for b in blocks(page))]


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=[str(p.relative_to(ROOT)) for p in PAGES_WITH_PYTHON])
def test_the_python_examples_run(page, request, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCACHE_SM", "86")
    monkeypatch.chdir(tmp_path)
    shell = None

    def get_shell():
        nonlocal shell
        if shell is None:
            shell = request.getfixturevalue("ip")
        return shell

    page_blocks = blocks(page)
    ran = run_page(page_blocks, tmp_path, get_shell)
    assert ran == sum(1 for b in page_blocks if b.lang == "python" and b.not_run is None)


def test_the_examples_are_found():
    """The extraction finds what the pages hold: the README's notebook cells and
    its Python examples, and examples of every kind in docs/."""
    readme = python_blocks([ROOT / "README.md"])
    assert {b.kind for b in readme} >= {"cell", "script"}, [b.where for b in readme]
    everything = python_blocks()
    assert {b.kind for b in everything} == {"cell", "config", "script"}
    assert len(everything) >= 8, [b.where for b in everything]
    for page in PAGES:  # every block is closed where it should be: no fence is read as code
        for block in blocks(page):
            assert not FENCE.match(block.code.splitlines()[0] if block.code.strip() else ""), block.where


def test_few_examples_are_left_out_and_each_says_why():
    left_out = [b for b in python_blocks() if b.not_run is not None]
    assert len(left_out) <= MAX_NOT_RUN, [b.where for b in left_out]
    for block in left_out:
        assert len(block.not_run.split()) >= 2, f"{block.where}: say why it is not run"
    # every marker stands right before a Python block (a marker anywhere else marks nothing)
    markers = sum(1 for page in PAGES for _, line in prose(page) if NOT_RUN.fullmatch(line.strip()))
    assert markers == len(left_out)


def test_a_broken_example_fails(tmp_path, ip):
    """The runner fails on a failing script, cell or config, and skips only what is
    marked not run."""
    page = tmp_path / "broken.md"
    cases = {
        "script": "```python\nfrom gpucache_ext import CompileConfig\nCompileConfig(opt=7)\n```\n",
        "cell": ("```python\n%%gpukernel --sm 86 --quiet\nfrom numba import cuda\n\n"
                 "@cuda.jit('void(float32[:])')\ndef k(r):\n    r[0] = undefined_name\n```\n"),
        "usage": "```python\n%%gpukernel --sm 99\nx = 1\n```\n",
        "config": "```python\n# ipython_config.py\nc.GpuCacheMagics.no_such_setting = 1\n```\n",
        "exit": "```python\nraise SystemExit(1)\n```\n",
    }
    for name, text in cases.items():
        page.write_text(f"# {name}\n\n{text}")
        with pytest.raises(AssertionError, match=r"broken\.md:3: the \w+ example fails"):
            run_page(blocks(page), tmp_path, lambda: ip)
    page.write_text("# skipped\n\n<!-- not run: needs a GPU -->\n\n```python\nraise SystemExit(1)\n```\n\n"
                    "```text\nraise SystemExit(1)\n```\n")
    assert [b.not_run for b in blocks(page)] == ["needs a GPU", None]
    assert run_page(blocks(page), tmp_path, lambda: ip) == 0


# -- links ------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside code blocks, inline code removed: (line number, text)."""
    lines = page.read_text().splitlines()
    code = {n for block in blocks(page) for n in range(block.line, block.end + 1)}
    return [(n, re.sub(r"`+[^`]*`+", "", line)) for n, line in enumerate(lines, 1) if n not in code]


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    code = {n for block in blocks(page) for n in range(block.line, block.end + 1)}
    for n, line in enumerate(page.read_text().splitlines(), 1):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match and n not in code:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(pages) -> list[str]:
    broken = []
    for page in pages:
        for n, line in prose(page):
            for target in LINK.findall(line):
                if SCHEME.match(target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                if not dest.exists():
                    broken.append(f"{page.name}:{n}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{page.name}:{n}: {target} (no such heading in {dest.name})")
    return broken


def test_relative_links_point_to_existing_files_and_headings():
    assert broken_links(PAGES) == []
    readme_links = [t for _, line in prose(ROOT / "README.md") for t in LINK.findall(line)]
    for page in PAGES:  # the README links every page of docs/
        if page.parent.name == "docs" and page.name != "inspector-1200.md":
            assert f"docs/{page.name}" in readme_links, f"README.md does not link docs/{page.name}"


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A section: `x`\n\n[ok](page.md#a-section-x) [ok](#title) "
                    "[web](https://example.org/x) `[code](nowhere.md)`\n\n"
                    "[gone](nowhere.md) [bad anchor](page.md#nope) ![img](missing.png)\n"
                    "```\n[in code](nowhere-either.md)\n```\n")
    assert broken_links([page]) == [
        "page.md:7: nowhere.md (no such file)",
        "page.md:7: page.md#nope (no such heading in page.md)",
        "page.md:7: missing.png (no such file)",
    ]


def test_the_readmes_example_report_reads_as_the_real_one(ip, capsys):
    """The README's (and docs/magic.md's) example report, after the cell ran
    once without --fastmath: the same columns, hits and misses, and why."""
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("After the same cell ran once without `--fastmath`, the report reads:", 1)[1]
    header, row = shown.split("```", 2)[1].strip().splitlines()
    cell = next(b for b in python_blocks([ROOT / "README.md"]) if b.code.startswith("%%gpukernel")).code
    plain = cell.replace(" --fastmath", "", 1)
    assert plain != cell
    ip.run_cell(plain)
    capsys.readouterr()
    ip.run_cell(cell)
    real = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("kernel ", "axpy "))]
    assert real[0].split() == header.split()
    timings = re.compile(r"\s+\d+(\.\d+)? (ms|s)\s+\d+(\.\d+)? (ms|s)\s+")  # (what differs run to run)
    assert timings.split(real[1])[::5] == timings.split(row)[::5], (real[1], row)
    assert row in (ROOT / "docs" / "magic.md").read_text()
