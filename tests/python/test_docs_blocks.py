"""Every code block of README.md and docs/ runs as pasted, or is marked with a reason from the
closed list of tests/tools/docs_blocks.py; and the runner itself fails on a broken block."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/tools"))
import docs_blocks  # noqa: E402

BLOCKS = [b for path in docs_blocks.default_files() for b in docs_blocks.extract(path)]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_block(block):
    error = docs_blocks.check(block)
    assert error is None, error


def blocks_of(tmp_path, text):
    page = tmp_path / "page.md"
    page.write_text(text)
    return docs_blocks.extract(page)


def test_a_broken_block_fails(tmp_path):
    good, bad_sh, bad_py = blocks_of(tmp_path, (
        "```sh\ncerarrun --help >/dev/null\n```\n\n"
        "```sh\ntrue\nfalse  # broken on purpose\ntrue\n```\n\n"
        "```python\nimport cerar\nraise SystemExit(3)\n```\n"))
    assert docs_blocks.check(good) is None
    assert "failed" in docs_blocks.check(bad_sh)
    assert "failed" in docs_blocks.check(bad_py)


def test_console_blocks_run_their_prompt_lines(tmp_path):
    fine, broken = blocks_of(tmp_path, (
        "```console\n$ true\nthis output line is not run\n```\n"
        "```console\n$ true\n$ false\n```\n"))
    assert docs_blocks.check(fine) is None
    assert "failed" in docs_blocks.check(broken)


def test_markers_are_a_closed_list(tmp_path):
    gpu, unknown, bad_kind, yaml, output, malformed = blocks_of(tmp_path, (
        "<!-- docs-run: skip gpu -->\n```sh\nnvidia-smi\n```\n"
        "<!-- docs-run: skip someday -->\n```sh\ntrue\n```\n"
        "<!-- docs-run: maybe long -->\n```sh\ntrue\n```\n"
        "```yaml\na: 1\n```\n"
        "<!-- docs-run: no output -->\n```\n[0] hello\n```\n"
        "<!-- docs-run: skipgpu -->\n```sh\nnvidia-smi\n```\n"))
    assert docs_blocks.check(gpu) is None  # skipped, not run: no GPU needed
    assert "unknown skip reason 'someday'" in docs_blocks.check(unknown)
    assert "unknown marker kind 'maybe'" in docs_blocks.check(bad_kind)
    assert "needs a 'docs-run: no <reason>' marker" in docs_blocks.check(yaml)
    assert docs_blocks.check(output) is None
    assert "malformed marker" in docs_blocks.check(malformed)  # not run as unmarked


def test_a_skipped_block_is_still_parsed(tmp_path):
    shell, python = blocks_of(tmp_path, (
        "<!-- docs-run: skip long -->\n```sh\nif true; then echo\n```\n"
        "<!-- docs-run: skip gpu -->\n```python\ndef f(:\n```\n"))
    assert "syntax error" in docs_blocks.check(shell)
    assert "SyntaxError" in docs_blocks.check(python) or "invalid syntax" in docs_blocks.check(python)


def test_every_page_has_blocks_found():
    # A fence the extractor misses would leave its commands unchecked: count them another way.
    for path in docs_blocks.default_files():
        openings = len(re.findall(r"^\s*```\S+\s*$", path.read_text(), re.M))
        assert openings <= len(docs_blocks.extract(path)), path
        assert docs_blocks.indented_code(path) == [], f"{path}: fence these code blocks"


def test_indented_code_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run:\n\n    cerarrun -np 4 python train.py\n\nor\n\n```sh\n\n    true\n```\n")
    assert docs_blocks.indented_code(page) == [3]  # the fenced one is the runner's


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = readme.split("## Two commands", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    test_command = [l.split("#")[0].strip() for l in commands.splitlines() if "test" in l][0]
    assert test_command == "scripts/test.sh"
    ci = (ROOT / ".ci/run").read_text()
    assert re.search(r"^" + re.escape(test_command) + r"\b", ci, re.M), ci


def test_the_index_lists_every_page():
    index = (ROOT / "docs/index.md").read_text()
    listed = re.findall(r"^- (docs/\S+\.md) — ", index, re.M)
    pages = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
    assert sorted(set(listed)) == [p for p in pages if p != "docs/index.md"]
    assert len(listed) == len(set(listed)), "a page listed twice"
