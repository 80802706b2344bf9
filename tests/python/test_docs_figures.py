"""The README's measured figures are bench/results/'s: bench/docs_figures.py --check fails when a
generated block differs from what its results file gives."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/docs_figures.py"
HEADLINE = "bench/results/headline/headline.json"


def check(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--root", str(root)],
                          capture_output=True, text=True)


def copy(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / Path(HEADLINE).parent).mkdir(parents=True)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / HEADLINE, tmp_path / HEADLINE)
    return tmp_path


def test_the_figures_match_their_results():
    result = check(ROOT)
    assert result.returncode == 0, result.stderr
    readme = (ROOT / "README.md").read_text()
    assert "<!-- figures: headline-line -->" in readme and "<!-- figures: headline-table -->" in readme


def test_an_edited_figure_fails(tmp_path):
    root = copy(tmp_path)
    readme = (root / "README.md").read_text()
    row = json.loads((root / HEADLINE).read_text())[1]
    figure = f"{row['cerar_auto_s']:.2f} s with CERAR"
    assert figure in readme
    (root / "README.md").write_text(readme.replace(figure, "1.00 s with CERAR"))
    result = check(root)
    assert result.returncode == 1 and "README.md" in result.stderr


def test_new_results_fail_until_regenerated(tmp_path):
    root = copy(tmp_path)
    rows = json.loads((root / HEADLINE).read_text())
    rows[0]["ring_s"] *= 1.5
    (root / HEADLINE).write_text(json.dumps(rows))
    assert check(root).returncode == 1
    subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], check=True)
    assert check(root).returncode == 0
    assert f"{rows[0]['ring_s']:.2f}" in (root / "README.md").read_text()
