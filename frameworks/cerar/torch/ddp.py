"""A DistributedDataParallel communication hook that reduces DDP's gradient buckets through
cerar's runtime (the exact ring or CERAR, as the runtime selects):

    import cerar.torch.ddp as cddp
    model = DistributedDataParallel(model)
    cddp.register_cerar_hook(model)            # cerar.init() from the same launcher variables

Each bucket is averaged in place over all ranks under the name "ddp.<k>.<bucket index>", where
k counts the hook states of this process in creation order (so it is the same on every rank
that builds its models in the same order). The hook only submits the bucket and returns a
torch.futures.Future; a helper thread waits on the runtime's handles (the GIL released) and
completes the futures, with the CerarError as the future's exception when a bucket fails.
"""
import itertools
import queue
import threading

import torch

import cerar
from cerar import Average
from cerar.torch import allreduce_async_
from cerar.torch._compat import bucket_buffer

_states = itertools.count()


class CerarHookState:
    """The state argument of register_comm_hook: the bucket name prefix, and counters."""

    def __init__(self, prefix=None):
        self.prefix = prefix if prefix is not None else f"ddp.{next(_states)}"
        self.buckets_submitted = 0

    def name(self, bucket):
        return f"{self.prefix}.{bucket.index()}"


class _Completer:
    """One thread per process that waits on handles in submission order and completes their
    futures. A thread rather than a runtime callback: futures' callbacks then never run on the
    runtime's coordinator thread, and DDP's autograd thread never waits."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def submit(self, handle, future, result):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cerar-ddp-futures",
                                                daemon=True)
                self._thread.start()
        self._queue.put((handle, future, result))

    def _run(self):
        while True:
            handle, future, result = self._queue.get()
            try:
                handle.wait()
            except Exception as error:  # CerarError; set so that DDP raises it on this rank
                future.set_exception(error)
            else:
                future.set_result(result)


_completer = _Completer()


def cerar_hook(state, bucket):
    """DDP communication hook: averages `bucket` over all ranks through cerar, asynchronously.

    Returns a Future whose value is the bucket's (reduced in place) flat gradient tensor.
    """
    tensor = bucket_buffer(bucket)
    future = torch.futures.Future()
    try:
        handle = allreduce_async_(tensor, name=state.name(bucket), op=Average)
    except Exception as error:  # e.g. cerar not initialized: DDP raises it from backward
        future.set_exception(error)
    else:
        state.buckets_submitted += 1
        _completer.submit(handle, future, tensor)
    # set_exception stores the error as the future's value, which only Python's wait() raises;
    # DDP's reducer reads the value in C++. A continuation that waits turns it into the
    # future's error, so that DDP raises the CerarError's message.
    return future.then(_value)


def _value(future):
    return future.wait()


def register_cerar_hook(model, state=None, **init_overrides):
    """Starts cerar if needed (init(**init_overrides), e.g. algorithm="ring") and registers
    cerar_hook on the DistributedDataParallel `model`. Returns the hook's state."""
    if not cerar.is_initialized():
        cerar.init(**init_overrides)
    state = state if state is not None else CerarHookState()
    model.register_comm_hook(state, cerar_hook)
    return state
