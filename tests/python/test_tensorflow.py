"""cerar.tensorflow: Horovod's TensorFlow API on 2 ranks (workers/tf_*.py say what each checks).
Skips where TensorFlow is absent, unless CERAR_REQUIRE_TF=1 (scripts/tf-env.sh)."""
import os

import pytest

from conftest import WORKERS, assert_ok, needs_runtime, run_job
from elastic_fake_driver import FakeDriver, needs_store_client

# Read here and not passed on: the ranks' runtime would warn of a variable it does not know.
REQUIRED = os.environ.pop("CERAR_REQUIRE_TF", None) == "1"
try:
    import tensorflow  # noqa: F401
    HAVE_TF = True
except ImportError:
    if REQUIRED:
        raise
    HAVE_TF = False
# The jobs need TensorFlow; the import error's test runs everywhere.
needs_tf = pytest.mark.skipif(not HAVE_TF, reason="TensorFlow is not installed "
                              "(scripts/tf-env.sh runs these tests)")
pytestmark = needs_runtime
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}


@needs_tf
def test_collectives_eager_and_in_tf_function():
    assert_ok(run_job("tf_ops.py", np=2, env=ENV), "tf ops OK", np=2)


@needs_tf
@pytest.mark.parametrize("status_op", ["compiled", "off"])
def test_errors_reach_every_rank(status_op):
    env = {**ENV, "TF_STATUS_OP": status_op}
    # The first compiled run on a machine builds the op (about 20 s) while the ranks wait.
    assert_ok(run_job("tf_errors.py", np=2, env=env, timeout=180), "tf errors OK", np=2)


@needs_tf
def test_training_matches_one_process():
    assert_ok(run_job("tf_train.py", np=2, env=ENV), "tf train OK", np=2)


@needs_tf
def test_tf1_graph_with_more_collectives_than_threads():
    assert_ok(run_job("tf_graph_v1.py", np=2, env=ENV, timeout=90), "tf graph v1 OK", np=2)


@needs_tf
@needs_store_client
def test_elastic_custom_loop_resumes_after_a_worker_is_killed(tmp_path):
    """3 workers run a custom tf.function loop under a fake elastic driver; one is killed
    mid-loop: the other two restore the last commit, go on at size 2 and end with equal
    replicas, every step done."""
    import signal
    driver = FakeDriver(tmp_path, WORKERS / "tf_elastic.py")
    try:
        codes = driver.kill_first_and_go_on("loop at 3 ranks", steps=5, **ENV)
        assert codes == {"w0": -signal.SIGKILL, "w1": 0, "w2": 0}, driver.all_output()
        results = [driver.result("w1"), driver.result("w2")]
        assert [(r["rank"], r["size"], r["step"]) for r in results] == [(0, 2, 40), (1, 2, 40)]
        assert results[0]["values"] == results[1]["values"], "replicas differ"
        assert all(r["restores"] == 1 and r["resets"] == 1 for r in results), results
        assert "size 2" in driver.output("w1"), driver.output("w1")
    finally:
        driver.stop()


def test_import_error_names_tensorflow(tmp_path):
    """Where TensorFlow does not import, the error says what cerar.tensorflow needs."""
    import subprocess
    import sys
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("raise ImportError('absent')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", "import cerar.tensorflow"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cerar.tensorflow needs TensorFlow >= 2.16" in result.stderr, result.stderr


@needs_tf
@pytest.mark.parametrize("compiler", ["absent", "failing"])
def test_status_op_is_done_without_when_it_cannot_be_built(compiler, tmp_path, monkeypatch,
                                                           caplog):
    """No compiler, or one that fails: library() is None and a warning says why, once; the
    collectives then fail as Python ops do (test_errors_reach_every_rank[off])."""
    import logging
    from cerar.tensorflow import status_op
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if compiler == "absent":
        monkeypatch.delenv("CXX", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))  # no c++, no g++
        expected = "no C++ compiler"
    else:
        monkeypatch.setenv("CXX", "false")
        expected = "failed"
    monkeypatch.setattr(status_op, "_state", {})
    with caplog.at_level(logging.WARNING, logger="cerar.tensorflow"):
        assert status_op.library() is None
        assert status_op.library() is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "cerar.tensorflow"]
    assert len(warnings) == 1 and expected in warnings[0], warnings
    assert not list(tmp_path.glob("cerar/tf-status-op/*.so")), "a library was left behind"
