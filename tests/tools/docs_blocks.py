#!/usr/bin/env python3
"""Runs the fenced code blocks of README.md and docs/*.md as a reader would paste them.

bash/sh blocks run in the repository root under `bash -e` with .venv activated; console blocks
run their `$ ` lines the same way; python blocks run with .venv/bin/python. A block that cannot
run here carries a marker on the line right before it, with one reason of a closed list:

    <!-- docs-run: skip gpu -->      needs what CI lacks, or takes too long (SKIP_REASONS)
    <!-- docs-run: no output -->     is not a command at all (NO_REASONS)

A marked shell or Python block is still parsed (bash -n, compile()), so a typo fails there too;
an unknown reason, or a block in another language without a `no` marker, is an error.
Usage: docs_blocks.py [--list] [FILE...]   (default: README.md and docs/*.md)"""
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"bash", "sh", "console", "python"}
# What CI lacks, or what is too long for its two minutes.
SKIP_REASONS = {
    "hosts": "several hosts (ssh, torchrun or mpirun across machines)",
    "gpu": "a CUDA device",
    "slurm": "a SLURM cluster",
    "kubernetes": "a Kubernetes cluster",
    "tensorflow": "the TensorFlow environment (scripts/tf-env.sh)",
    "torch2": "torch 2.x (the pinned environment, scripts/torch2-env.sh)",
    "wheel": "the wheel in dist/ (scripts/wheel.sh)",
    "checkout": "another repository's checkout (Horovod's)",
    "root": "root and network namespaces (bench/'s emulated cluster)",
    "long": "minutes: a benchmark, the whole suite, a build or a download",
}
# Blocks that are not commands.
NO_REASONS = {
    "output": "what a command prints",
    "config": "a file's contents (YAML, a hostfile, a job script)",
    "fragment": "an excerpt that needs the reader's own model, data or program around it",
    "text": "a formula, a diagram or a file format, not code",
}
MARKER = re.compile(r"<!--\s*docs-run:\s*(\S+)\s+(\S+)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
TIMEOUT = 120


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: tuple  # (kind, reason) or None
    before: str = ""  # the line before the fence, to catch a malformed marker

    @property
    def where(self):
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def extract(path):
    lines = Path(path).read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, indent, language = i, match.group(1), match.group(2).lower()
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l
                         for l in lines[start + 1:end])
        previous = lines[start - 1].strip() if start else ""
        marker = MARKER.fullmatch(previous)
        blocks.append(Block(Path(path), start + 1, language, body + "\n",
                            marker.groups() if marker else None, previous))
        i = end + 1
    return blocks


def indented_code(path):
    """Line numbers of indented (4-space) code blocks outside fences and lists: the runner
    reads fenced blocks only, so a page must fence its code to have it checked."""
    lines, found, inside = Path(path).read_text().splitlines(), [], False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            inside = not inside
        elif (not inside and line.startswith("    ") and line.strip() and i and
              not lines[i - 1].strip() and not re.match(r"\s*([-*|]|\d+\.)", line)):
            found.append(i + 1)
    return found


def check_marker(block):
    """An error message for a marker that is not in the closed list, or for a block that
    cannot run and says nothing; None when the block is fine as marked."""
    if block.marker is None:
        if "docs-run" in block.before:
            return f"{block.where}: malformed marker {block.before!r} " \
                   "(<!-- docs-run: skip|no REASON -->)"
        if block.language not in RUNNABLE:
            return f"{block.where}: a ```{block.language or '(none)'} block needs a " \
                   f"'docs-run: no <reason>' marker ({', '.join(NO_REASONS)})"
        return None
    kind, reason = block.marker
    reasons = {"skip": SKIP_REASONS, "no": NO_REASONS}.get(kind)
    if reasons is None:
        return f"{block.where}: unknown marker kind '{kind}' (skip or no)"
    if reason not in reasons:
        return f"{block.where}: unknown {kind} reason '{reason}' (one of {', '.join(reasons)})"
    if kind == "skip" and block.language not in RUNNABLE:
        return f"{block.where}: 'skip' is for commands; a ```{block.language} block is 'no'"
    return None


def script_of(block):
    """The shell script or Python program the block is."""
    if block.language == "console":
        return "".join(l[2:] + "\n" for l in block.text.splitlines() if l.startswith("$ "))
    return block.text


def parse(block):
    """Syntax only, for skipped blocks: an error message or None."""
    if block.language == "python":
        try:
            compile(block.text, block.where, "exec")
        except SyntaxError as error:
            return f"{block.where}: {error}"
        return None
    result = subprocess.run(["bash", "-n"], input=script_of(block), text=True,
                            capture_output=True)
    return f"{block.where}: {result.stderr.strip()}" if result.returncode else None


def environment():
    env = dict(os.environ)
    venv = ROOT / ".venv"
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env.pop("PYTHONHOME", None)
    return env


def run(block, timeout=TIMEOUT):
    """Runs a runnable, unmarked block: (ok, output)."""
    with tempfile.TemporaryDirectory(prefix="docs-run-") as scratch:
        env = dict(environment(), TMPDIR=scratch)
        if block.language == "python":
            command = [str(ROOT / ".venv/bin/python"), "-c", block.text]
        else:
            # As pasted into a shell with the venv active; -e: any failing command fails.
            command = ["bash", "-e", "-o", "pipefail", "-c",
                       f"source '{ROOT}/.venv/bin/activate'\n{script_of(block)}"]
        try:
            result = subprocess.run(command, cwd=ROOT, env=env, text=True, timeout=timeout,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except subprocess.TimeoutExpired as error:
            return False, f"timed out after {timeout} s\n{error.output or ''}"
        return result.returncode == 0, result.stdout


def default_files():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def check(block):
    """None when the block passes (runs, or is marked and parses); else why not."""
    error = check_marker(block)
    if error:
        return error
    if block.marker is not None:
        return parse(block) if block.language in RUNNABLE else None
    ok, output = run(block)
    return None if ok else f"{block.where}: failed\n{block.text}--- output ---\n{output[-4000:]}"


def main(argv):
    listing = "--list" in argv
    files = [Path(a).resolve() for a in argv if a != "--list"] or default_files()
    failures = 0
    for path in files:
        for block in extract(path):
            state = " ".join(block.marker) if block.marker else "run"
            if listing:
                print(f"{block.where}\t{block.language}\t{state}")
                continue
            error = check(block)
            print(f"{'FAIL' if error else 'ok  '} {block.where} ({state})", flush=True)
            if error:
                print(error, file=sys.stderr)
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
