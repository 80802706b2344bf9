"""The settings table as Python sees it (cerar._cerar.settings(), core/config/settings.cc): it makes
RuntimeConfig's attributes and cerarrun's knob flags, so neither can miss a setting."""
import pytest

_cerar = pytest.importorskip("cerar._cerar")
run = pytest.importorskip("cerar.run")


def test_every_attribute_of_runtime_config_is_a_row_with_its_default():
    rows = _cerar.settings()
    config = _cerar.RuntimeConfig()
    attributes = {name for name in dir(config)
                  if not name.startswith("_") and name != "from_environment"}
    assert attributes == {row["attribute"] for row in rows}
    for row in rows:
        assert getattr(config, row["attribute"]) == row["default"], row["variable"]
        assert row["kind"] in ("job", "rank") and row["why"]
    kinds = [row["kind"] for row in rows]
    assert kinds == sorted(kinds), "job-wide rows come first"
    by_variable = {row["variable"]: row for row in rows}
    assert by_variable["CERAR_DYNAMIC_PROCESS_SETS"]["aliases"] == ["HOROVOD_DYNAMIC_PROCESS_SETS"]
    assert by_variable["CERAR_FUSION_THRESHOLD"]["high"] == 1 << 40
    assert by_variable["CERAR_ALGORITHM"]["choices"] == ["auto", "ring", "cerar"]


def test_overrides_set_the_table_attributes():
    config = _cerar.RuntimeConfig()
    config.fusion_threshold_bytes = 4096
    config.algorithm = "ring"
    config.autotune = True
    assert (config.fusion_threshold_bytes, config.algorithm, config.autotune) == (4096, "ring",
                                                                                  True)


def test_every_flagged_row_is_a_cerarrun_flag():
    flagged = [row for row in _cerar.settings() if row["flag"]]
    assert {row["flag"]["name"] for row in flagged} == {
        "fusion-threshold-mb", "cycle-time-ms", "algorithm", "components", "eps", "timeline",
        "autotune", "autotune-log-file", "autotune-warmup-samples",
        "autotune-steps-per-sample", "timeout", "network-interfaces", "metrics-port"}
    argv = ["-np", "1"]
    for row in flagged:
        argv.append("--" + row["flag"]["name"])
        if row["type"] != "flag":
            argv.append(row["choices"][0] if row["choices"] else "2")
    env = run.knob_env(run.parse_args(argv + ["true"]))
    assert set(env) == {row["variable"] for row in flagged}
    assert env["CERAR_FUSION_THRESHOLD"] == str(2 << 20)  # the flag is MiB, the variable bytes
    assert env["CERAR_CYCLE_TIME"] == "2.0" and env["CERAR_COMPONENTS"] == "2"
    assert env["CERAR_AUTOTUNE"] == "1" and env["CERAR_ALGORITHM"] == "auto"
    assert run.knob_env(run.parse_args(["-np", "1", "true"])) == {}
