"""Starts a torch.distributed worker as `np` local ranks with torch's variables (RANK,
WORLD_SIZE) and a file:// store in the test's folder (no port to pick), as a job launched by
hand would; used by the tests of the "cerar" backend under torch 2.x's integrations."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import WORKERS

torch = pytest.importorskip("torch")
TORCH_VERSION = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
# Set by scripts/torch2-env.sh, whose environment exists to run these tests: there a missing
# package or an old torch fails the module's collection instead of skipping its tests.
REQUIRED = os.environ.get("CERAR_REQUIRE_TORCH2") == "1"


def needs_package(module, what):
    """A skip mark for tests that need `module` (looked for only on torch 2.4 or newer, where
    those tests run). A mark, not a module-level skip: a module with nothing collected fails."""
    def missing():
        try:
            return importlib.util.find_spec(module) is None
        except ImportError:
            return True
    if REQUIRED and missing():
        raise ImportError(f"{what} is not installed, and CERAR_REQUIRE_TORCH2=1")
    return pytest.mark.skipif(TORCH_VERSION >= (2, 4) and missing(),
                              reason=f"{what} is not installed (scripts/envs/torch2.txt has it)")


def needs_torch2(what):
    """A skip mark for tests of `what` on a torch older than 2.4 (Debian's 1.13 in CI)."""
    if REQUIRED and TORCH_VERSION < (2, 4):
        raise ImportError(f"{what} needs torch 2.4 or newer, this is {torch.__version__}, "
                          "and CERAR_REQUIRE_TORCH2=1")
    return pytest.mark.skipif(TORCH_VERSION < (2, 4),
                              reason=f"{what} on CPU needs torch 2.4 or newer, this is "
                                     f"{torch.__version__} (CI runs it in scripts/torch2-env.sh)")


def clean_env(**extra):
    """This process's environment without a launcher's or cerar's job variables (the warning
    filters of scripts/torch2-env.sh kept), plus `extra`."""
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if k not in launcher and (
        not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_", "TORCHELASTIC_"))
        or k == "CERAR_WARNING_FILTERS")}
    env.update(CERAR_LOG_LEVEL="fatal", OMP_NUM_THREADS="1", **extra)
    return env


def run_ranks(tmp_path, script, args=(), np=4, env=None, timeout=120):
    """Runs workers/<script> as `np` ranks; returns their exit codes and joined output."""
    base = clean_env(CERAR_TEST_STORE=f"file://{tmp_path / 'store'}", **(env or {}))
    procs = [subprocess.Popen([sys.executable, str(WORKERS / script), *map(str, args)],
                              env={**base, "RANK": str(r), "WORLD_SIZE": str(np)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL)
             for r in range(np)]
    return finish(procs, timeout, f"{script} {' '.join(map(str, args))}")


def finish(procs, timeout, what):
    """The exit codes and joined output of `procs`; all are killed, and the test fails, when one
    outlives `timeout`."""
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"{what} did not finish in {timeout} s:\n" + "\n".join(outputs))
    return [p.returncode for p in procs], "\n".join(outputs)


def assert_ranks(codes, output, marker):
    """Every rank exited 0 and printed "[rank] <marker>"."""
    for rank, code in enumerate(codes):
        assert code == 0, f"rank {rank} exited {code}\n{output[-6000:]}"
        assert f"[{rank}] {marker}" in output, f"rank {rank}: no {marker!r}\n{output[-6000:]}"
