"""cerar.keras: Keras 3's fit on 2 ranks on each Keras backend (workers/keras_fit.py says what
each run checks). A backend runs where Keras and its framework import; scripts/tf-env.sh
(CERAR_REQUIRE_TF=1) requires the tensorflow and jax backends, scripts/torch2-env.sh
(CERAR_REQUIRE_TORCH2=1) the torch one, and each runs only those."""
import importlib.util
import os

import pytest

from conftest import WORKERS, assert_ok, needs_runtime, run_job
from elastic_fake_driver import FakeDriver, needs_store_client

pytestmark = needs_runtime
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
REQUIRED = set()
if os.environ.get("CERAR_REQUIRE_TF") == "1":
    REQUIRED |= {"tensorflow", "jax"}
if os.environ.get("CERAR_REQUIRE_TORCH2") == "1":
    REQUIRED |= {"torch"}


def _backend(name):
    """A pytest.param for the backend: skipped where Keras or the framework does not import
    (or another environment's script runs it); an error where this environment requires it."""
    missing = [m for m in ("keras", name) if importlib.util.find_spec(m) is None]
    if missing and name in REQUIRED:
        raise ImportError(f"the keras {name} backend needs {missing}, required here")
    reason = (f"{', '.join(missing)} not installed" if missing else
              f"{'/'.join(sorted(REQUIRED))} only in this environment"
              if REQUIRED and name not in REQUIRED else None)
    return pytest.param(name, marks=pytest.mark.skipif(reason is not None, reason=reason or ""))


BACKENDS = [_backend(b) for b in ("tensorflow", "jax", "torch")]


@pytest.mark.parametrize("fake", ["raise ImportError('absent')", "__version__ = '2.15.0'"])
def test_import_error_names_keras_3(tmp_path, fake):
    """Where Keras does not import, or is Keras 2, the error says what cerar.keras needs."""
    import subprocess
    import sys
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "__init__.py").write_text(fake + "\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", "import cerar.keras"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cerar.keras needs Keras 3" in result.stderr, result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_matches_one_process_with_every_callback(backend, tmp_path):
    result = run_job("keras_fit.py", np=2, args=["train", tmp_path],
                     env={**ENV, "KERAS_BACKEND": backend}, timeout=240)
    assert_ok(result, "keras fit OK", np=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_models_that_differ_fail_on_every_rank(backend, tmp_path):
    result = run_job("keras_fit.py", np=2, args=["mismatch", tmp_path],
                     env={**ENV, "KERAS_BACKEND": backend}, timeout=180)
    assert_ok(result, "keras mismatch OK", np=2)


@needs_store_client
@pytest.mark.parametrize("backend", BACKENDS)
def test_elastic_fit_resumes_after_a_worker_is_killed(backend, tmp_path):
    """3 workers fit under a fake elastic driver; one is killed mid-fit: the other two restore
    the last commit, go on at size 2 and end with equal replicas, all epochs done."""
    import signal
    driver = FakeDriver(tmp_path, WORKERS / "keras_elastic.py")
    try:
        codes = driver.kill_first_and_go_on("fit at 3 ranks", KERAS_BACKEND=backend, **ENV)
        assert codes == {"w0": -signal.SIGKILL, "w1": 0, "w2": 0}, driver.all_output()
        results = [driver.result("w1"), driver.result("w2")]
        assert [(r["rank"], r["size"], r["epoch"]) for r in results] == [(0, 2, 3), (1, 2, 3)]
        assert results[0]["weights"] == results[1]["weights"], "replicas differ"
        assert all(r["restores"] == 1 and r["resets"] == 1 for r in results), results
    finally:
        driver.stop()
