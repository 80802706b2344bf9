"""docs/from-horovod.md cannot drift: every name of docs/horovod-names.txt has one row, every row
one listed name, and every row's status is what the code does."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

run = pytest.importorskip("cerar.run")
_cerar = pytest.importorskip("cerar._cerar")

DOCS = Path(__file__).resolve().parents[2] / "docs"
STATUSES = {"api": {"same", "differs"},
            "tensorflow": {"same", "differs", "missing"},
            "keras": {"same", "differs", "missing"},
            "variables": {"alias", "same", "no effect", "not read"},
            "flags": {"same", "differs", "no effect", "refused"}}
SECTIONS = {"## The API": "api", "## The TensorFlow API": "tensorflow",
            "## The Keras API": "keras", "## Variables": "variables",
            "## horovodrun's flags": "flags"}


def _rows():
    """{section: [(names, status, text)]} from the page's tables."""
    rows, section = {key: [] for key in STATUSES}, None
    for line in (DOCS / "from-horovod.md").read_text().splitlines():
        section = next((key for title, key in SECTIONS.items() if line.startswith(title)),
                       section)
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if section is None or not line.startswith("| `") or len(cells) != 3:
            continue
        rows[section].append((re.findall(r"`([^`]+)`", cells[0]), cells[1], cells[2]))
    return rows


ROWS = _rows()


def test_every_listed_name_has_one_row_and_every_row_a_listed_name():
    listed = (DOCS / "horovod-names.txt").read_text().split()
    assert len(listed) == len(set(listed)), "a name is listed twice"
    named = [name for key, section in ROWS.items() if key not in ("tensorflow", "keras")
             for names, _, _ in section for name in names]
    assert sorted(named) == sorted(listed)
    listed_tf = (DOCS / "horovod-tf-names.txt").read_text().split()
    assert len(listed_tf) == len(set(listed_tf)), "a TensorFlow name is listed twice"
    assert sorted(n for names, _, _ in ROWS["tensorflow"] for n in names) == sorted(listed_tf)
    listed_keras = (DOCS / "horovod-keras-names.txt").read_text().split()
    assert len(listed_keras) == len(set(listed_keras)), "a Keras name is listed twice"
    assert sorted(n for names, _, _ in ROWS["keras"] for n in names) == sorted(listed_keras)
    for section, statuses in STATUSES.items():
        assert ROWS[section], section
        for names, status, _ in ROWS[section]:
            assert status in statuses, (names, status)


def test_api_rows_exist_in_cerar_torch():
    hvd = pytest.importorskip("cerar.torch")
    for names, status, text in ROWS["api"]:
        (name,) = names
        target = hvd
        for part in name.split(".")[1:]:
            assert hasattr(target, part), f"{name} is said {status} but cerar.torch lacks it"
            target = getattr(target, part)
        if status == "differs":
            assert text, name


def assert_rows_match(module, section):
    """Every row of `section` said same or differs names something `module` has; every row said
    missing, something it lacks; differs and missing rows say why."""
    for (name,), status, text in ROWS[section]:
        target, found = module, True
        for part in name.split(".")[1:]:
            found = found and hasattr(target, part)
            target = getattr(target, part, None)
        assert found == (status != "missing"), f"{name} is said {status}"
        if status in ("differs", "missing"):
            assert text, name


def test_tensorflow_rows_are_what_cerar_tensorflow_has():
    """Every TensorFlow row said same or differs names something cerar.tensorflow has; every
    row said missing, something it lacks."""
    if os.environ.get("CERAR_REQUIRE_TF") != "1":
        pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    import cerar.tensorflow as hvd
    assert_rows_match(hvd, "tensorflow")


def test_keras_rows_are_what_cerar_keras_has():
    """As the TensorFlow rows, for cerar.keras on Keras's TensorFlow backend, where Horovod's
    spelling cerar.tensorflow.keras must be the same module."""
    if os.environ.get("CERAR_REQUIRE_TF") != "1":
        pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
        pytest.importorskip("keras", reason="Keras is not installed")
    import cerar.keras as hvd
    import cerar.tensorflow.keras
    assert cerar.tensorflow.keras is hvd, "Horovod's spelling is another module"
    assert_rows_match(hvd, "keras")


def test_variable_rows_are_what_the_runtime_and_cerarrun_do(tmp_path, monkeypatch):
    aliases = {alias for row in _cerar.settings() for alias in row["aliases"]}
    by_status = {}
    for (name,), status, _ in ROWS["variables"]:
        by_status.setdefault(status, []).append(name)
    twin = {alias: row["variable"] for row in _cerar.settings() for alias in row["aliases"]}
    for (name,), status, text in ROWS["variables"]:
        if status == "alias":
            assert name in aliases, f"{name} is said an alias but no setting reads it"
            assert _first_cerar_name(text) == twin[name], (name, text)
    for name in by_status["no effect"] + by_status["not read"] + by_status["same"]:
        assert name not in aliases, f"{name} is a setting's alias"
    # "same": read by cerarrun (--start-timeout's default).
    for name in by_status["same"]:
        monkeypatch.setenv(name, "17")
        assert "17.0" in run.knob_env(run.parse_args(["-np", "1", "true"])).values(), name
        monkeypatch.delenv(name)
    # One rank's init: each "no effect" variable warns, each "not read" one is silent.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CERAR_", "HOROVOD_"))}
    env.update({name: "1" for name in by_status["no effect"] + by_status["not read"]})
    result = subprocess.run([sys.executable, "-c", "import cerar; cerar.init(); cerar.shutdown()"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    for name in by_status["no effect"]:
        assert any(f"WARNING: {name} " in line and "has no effect" in line for line in lines), \
            f"{name} is said to have no effect, but init does not warn of it:\n{result.stderr}"
    for name in by_status["not read"]:
        assert not any(f" {name} " in line for line in lines), (name, result.stderr)


def _argv(flag, tmp_path):
    """A command line giving `flag` a value it takes."""
    parser_actions = {option: action for action in run.build_parser()._actions
                      for option in action.option_strings}
    action = parser_actions[flag]
    if flag == "--config-file":
        (tmp_path / "empty.yaml").write_text("")
        values = [str(tmp_path / "empty.yaml")]
    elif action.nargs == 0:
        values = []
    elif isinstance(action.nargs, int):
        values = ["1"] * action.nargs
    else:
        values = [action.choices[0] if action.choices else "1"]
    return ["-np", "1", flag, *values, "true"]


def test_flag_rows_are_what_cerarrun_does(tmp_path, capsys):
    for names, status, text in ROWS["flags"]:
        for flag in names:
            argv = _argv(flag, tmp_path)
            try:
                run.parse_args(argv)
                code = None
            except SystemExit as stop:
                code = stop.code
            err = capsys.readouterr().err
            if status == "refused":
                assert code == 2 and "cerarrun starts the ranks itself" in err, (flag, err)
                continue
            assert code in (None, 0), f"{flag} is said {status} but cerarrun refuses it: {err}"
            warned = "has no effect here" in err
            assert warned == (status == "no effect"), (flag, status, err)
            variable = _first_cerar_name(text)
            if variable and code is None:  # the variable the row names is the one it sets
                assert variable in run.knob_env(run.parse_args(argv)), (flag, variable)
                capsys.readouterr()


def _first_cerar_name(text):
    found = re.search(r"`(CERAR_[A-Z_]+)`", text)
    return found.group(1) if found else None
