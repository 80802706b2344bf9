"""cerar._cerar.StoreClient against the store's server, and the rendezvous scope that lets ranks
whose earlier starts differ meet in one start (cerarrun's elastic generations)."""
import os
import subprocess
import sys
import time

import pytest

from conftest import needs_runtime


@pytest.fixture
def server():
    from cerar._cerar import StoreServer
    store = StoreServer("127.0.0.1", 0, "s3cret")
    store.start()
    return store


def test_client_sets_gets_adds_and_checks(server):
    from cerar._cerar import StoreClient
    client = StoreClient("127.0.0.1", server.port, "s3cret", timeout_seconds=5)
    client.set("a/b", b"\x00value")
    assert client.get("a/b") == b"\x00value" and server.try_get("a/b") == b"\x00value"
    assert client.add("count", 2) == 2 and client.add("count", 0) == 2
    assert client.check(["a/b", "count"]) and not client.check(["a/b", "missing"])
    client.close()


def test_get_waits_for_the_key_and_times_out_with_cerars_class(server):
    import cerar
    from cerar._cerar import StoreClient
    client = StoreClient("127.0.0.1", server.port, "s3cret", timeout_seconds=5)
    began = time.monotonic()
    with pytest.raises(cerar.CerarTimeoutError, match="missing"):
        client.get("missing", timeout_seconds=0.3)
    assert 0.25 < time.monotonic() - began < 3
    with pytest.raises(cerar.InvalidArgumentError, match="> 0"):
        client.get("missing", timeout_seconds=0)


def test_an_unreachable_store_or_a_wrong_secret_is_an_error(server):
    import cerar
    from cerar._cerar import StoreClient
    with pytest.raises(cerar.CerarError):
        StoreClient("127.0.0.1", server.port, "wrong", timeout_seconds=1).set("k", b"v")
    assert server.try_get("k") is None
    from ports import free_port
    with pytest.raises(cerar.CerarTimeoutError, match="cannot reach"):
        StoreClient("127.0.0.1", free_port(), "", timeout_seconds=0.5)


_RANK = """
import os, sys, numpy as np, cerar, cerar.numpy as cn
rank = int(sys.argv[1])
for start in range(int(sys.argv[2])):   # earlier starts of this rank alone, unscoped
    cerar.init(rank=0, size=1, rendezvous_scope="")
    cerar.shutdown()
cerar.init(rank=rank, size=2, rendezvous_scope="elastic/7")
out = cn.allreduce(np.array([rank + 1.0]), op=cerar.Sum)
assert out[0] == 3.0, out
print("scoped OK", flush=True)
cerar.shutdown()
"""


@needs_runtime
def test_ranks_with_different_numbers_of_starts_meet_under_one_scope(server):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERAR_")}
    env.update(CERAR_RENDEZVOUS_ADDR="127.0.0.1", CERAR_RENDEZVOUS_PORT=str(server.port),
               CERAR_SECRET="s3cret", CERAR_TIMEOUT_SECONDS="20")
    procs = [subprocess.Popen([sys.executable, "-c", _RANK, str(rank), str(starts)],
                              env={**env, "CERAR_RANK": str(rank), "CERAR_SIZE": "2"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, starts in ((0, 2), (1, 0))]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0 and "scoped OK" in output, output
    assert server.try_get("cerar/runtime/elastic/7/starts/1") is not None
