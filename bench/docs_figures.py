#!/usr/bin/env python3
"""Writes the measured figures of README.md and docs/ from bench/results/, between markers

    <!-- figures: NAME -->
    ...generated text...
    <!-- /figures: NAME -->

so that a figure cannot say something its results file does not. --check writes nothing and
exits 1 naming each place whose text differs from what its results give (a test runs it).
Usage: bench/docs_figures.py [--check] [--root DIR]"""
import json
import re
import sys
from pathlib import Path



def load(root, path):
    return json.loads((root / path).read_text())


def headline_rows(root):
    return {row["config"]: row for row in load(root, "bench/results/headline/headline.json")}


def headline_line(root):
    """The README's one headline sentence: N = 8 at 200 Mbit/s, 64 MiB."""
    row = headline_rows(root)["n8-200mbit"]
    return (f"On {row['n']} ranks whose links are shaped to 200 Mbit/s, one "
            f"{row['bytes'] >> 20} MiB float32 all-reduce took **{row['cerar_auto_s']:.2f} s with "
            f"CERAR, {row['cerar_auto_over_torch_gloo']:.2f}x the time of torch.distributed "
            f"(gloo)**, against {row['ring_s']:.2f} s for the exact ring "
            f"(bench/results/headline/headline.json).")


def headline_table(root):
    lines = ["| ranks, link | CERAR s | ÷ its byte limit | exact ring s | ÷ its byte limit "
             "| CERAR ÷ torch-gloo | CERAR ÷ fastest Gloo all-reduce |",
             "|---|---|---|---|---|---|---|"]
    for row in headline_rows(root).values():
        rate = row["config"].split("-", 1)[1].replace("mbit", " Mbit/s")
        lines.append(f"| N = {row['n']}, {rate} | {row['cerar_auto_s']:.2f} | "
                     f"{row['cerar_auto_vs_limit']:.2f} | {row['ring_s']:.2f} | "
                     f"{row['ring_vs_limit']:.2f} | {row['cerar_auto_over_torch_gloo']:.2f} | "
                     f"{row['cerar_auto_over_best_other']:.2f} ({row['best_other']}) |")
    return "\n".join(lines)


FIGURES = {"headline-line": headline_line, "headline-table": headline_table}
BLOCK = re.compile(r"(<!-- figures: (\S+) -->\n)(.*?)(<!-- /figures: \2 -->)", re.S)


def render(root, text):
    def replace(match):
        name = match.group(2)
        if name not in FIGURES:
            raise SystemExit(f"unknown figures block '{name}' (known: {', '.join(FIGURES)})")
        return f"{match.group(1)}{FIGURES[name](root)}\n{match.group(4)}"
    return BLOCK.sub(replace, text)


def main(argv):
    check = "--check" in argv
    root = Path(argv[argv.index("--root") + 1]) if "--root" in argv else \
        Path(__file__).resolve().parents[1]
    stale = []
    for path in [root / "README.md"] + sorted((root / "docs").glob("*.md")):
        page = str(path.relative_to(root))
        text = path.read_text()
        new = render(root, text)
        if new != text:
            stale.append(page)
            if not check:
                path.write_text(new)
    if check and stale:
        print(f"figures differ from bench/results in: {', '.join(stale)} "
              f"(run bench/docs_figures.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
