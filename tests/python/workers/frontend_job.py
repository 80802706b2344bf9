"""The same misuse raises the same class through cerar.numpy, cerar.torch and cerar.jax.

Usage: frontend_job.py (2 ranks or more). Prints "frontend OK" (and which frameworks it
compared) on every rank."""
import numpy as np
import torch

import cerar
import cerar.numpy as cn
import cerar.torch as hvd
from common import check, fail

try:
    import jax.numpy as jnp

    import cerar.jax as cj
except ImportError as error:  # compared without jax, and said so
    cj, missing_jax = None, error
else:
    missing_jax = None


def raised(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - its class is what is compared
        return type(error)
    return None


def same_class(misuse, expected, **calls):
    """Each framework's call of `calls` (None: it has no such call) raises `expected`."""
    got = {fw: raised(call) for fw, call in calls.items() if call is not None}
    check(misuse, all(kind is expected for kind in got.values()),
          f"expected {expected.__name__}, got "
          + ", ".join(f"{fw}: {kind and kind.__name__}" for fw, kind in got.items()))


def jax_call(call):
    return None if cj is None else call


same_class("a collective before init()", ValueError,
           numpy=lambda: cn.allreduce(np.ones(3), name="early"),
           torch=lambda: hvd.allreduce(torch.ones(3), name="early"),
           jax=jax_call(lambda: cj.allreduce(jnp.ones(3), name="early")))

cerar.init(algorithm="ring")
r, n = cerar.rank(), cerar.size()

# A name still in flight: rank 0 submits each first alone, so they stay pending until the
# others submit theirs after the barrier. jax has no asynchronous call: its second call meets
# an operation numpy holds (names are the runtime's, whichever framework submitted them: a
# group's tensors are "<name>.<i>", and the message is the runtime's).
def submit_firsts():
    return {"numpy": cn.allreduce_async(np.ones(3), name="dup.numpy"),
            "torch": hvd.allreduce_async(torch.ones(3), name="dup.torch"),
            "jax": cn.allreduce_async(np.ones(3), name="dup.jax"),
            "group": hvd.grouped_allreduce_async([torch.ones(3)] * 2, name="dup.group")}


firsts = {}
if r == 0:
    firsts = submit_firsts()
    same_class("a name in flight", ValueError,
               numpy=lambda: cn.allreduce_async(np.ones(3), name="dup.numpy"),
               torch=lambda: hvd.allreduce_async(torch.ones(3), name="dup.torch"),
               jax=jax_call(lambda: cj.allreduce(jnp.ones(3), name="dup.jax")))
    try:
        cn.allreduce_async(np.ones(3), name="dup.group.1")
        fail("a group's tensor name accepted while the group is in flight")
    except ValueError as error:
        check("the runtime's message", "named 'dup.group.1' is already in flight on rank 0"
              in str(error), str(error))
cn.barrier()
if r > 0:
    firsts = submit_firsts()
for fw, handle in firsts.items():
    result = handle.wait()
    results = result if isinstance(result, list) else [result]
    check(f"the first {fw} dup completes",
          all(np.allclose(np.asarray(t), 1.0) for t in results))

read_only = np.ones(4)
read_only.flags.writeable = False
same_class("in place on a strided array", cerar.InvalidArgumentError,
           numpy=lambda: cn.allreduce_(np.ones((4, 4))[:, ::2], name="strided"),
           torch=lambda: hvd.allreduce_(torch.ones(4, 4)[:, ::2], name="strided"))
same_class("in place on a read-only array", cerar.InvalidArgumentError,
           numpy=lambda: cn.broadcast_(read_only, 0, name="read-only"))
same_class("reducescatter of a scalar", cerar.InvalidArgumentError,
           numpy=lambda: cn.reducescatter(np.float32(1.0), name="rs.scalar"),
           torch=lambda: hvd.reducescatter(torch.tensor(1.0), name="rs.scalar"))
same_class("alltoall with a split per rank too many", cerar.InvalidArgumentError,
           numpy=lambda: cn.alltoall(np.zeros(n), [1] * (n + 1), name="a2a.splits"),
           torch=lambda: hvd.alltoall(torch.zeros(n), torch.ones(n + 1, dtype=torch.int32),
                                      name="a2a.splits"))
same_class("alltoall with negative splits", cerar.InvalidArgumentError,
           numpy=lambda: cn.alltoall(np.zeros(n), [-1] * n, name="a2a.negative"),
           torch=lambda: hvd.alltoall(torch.zeros(n), torch.full((n,), -1, dtype=torch.int32),
                                      name="a2a.negative"))
same_class("alltoall of rows the ranks cannot share equally", cerar.InvalidArgumentError,
           numpy=lambda: cn.alltoall(np.zeros(n + 1), name="a2a.uneven"),
           torch=lambda: hvd.alltoall(torch.zeros(n + 1), name="a2a.uneven"))
same_class("a dtype the runtime does not carry", TypeError,
           numpy=lambda: cn.allreduce(np.zeros(3, np.complex64), name="complex"),
           torch=lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64), name="complex"),
           jax=jax_call(lambda: cj.allreduce(jnp.zeros(3, jnp.complex64), name="complex")))
unregistered = cerar.ProcessSet([0])
same_class("a process set never registered", ValueError,
           numpy=lambda: cn.allreduce(np.ones(3), name="unregistered", process_set=unregistered),
           torch=lambda: hvd.allreduce(torch.ones(3), name="unregistered",
                                       process_set=unregistered),
           jax=jax_call(lambda: cj.allreduce(jnp.ones(3), name="unregistered",
                                             process_set=unregistered)))

# The runtime goes on after every misuse.
total = cn.allreduce(np.ones(2), op=cerar.Sum, name="after")
if not np.allclose(total, n):
    fail(f"allreduce after the misuses: {total}")
cn.barrier()
compared = "numpy, torch, jax" if cj is not None else f"numpy, torch (no jax: {missing_jax!r})"
print(f"frontend OK ({compared})", flush=True)
cerar.shutdown()
