"""The Work objects of torch.distributed's backend "cerar" (cerar.torch.backend): a helper
thread per group completes them as the runtime's handles finish, and failures become the
exception classes torch's own backends raise."""
import threading

import torch
import torch.distributed as dist

from cerar import CerarError
from cerar.torch._completer import Completer

_c10d = torch._C._distributed_c10d


# --- errors -------------------------------------------------------------------------------------
# A failed collective raises cerar's typed error (a RuntimeError, as Gloo's failures are); on
# torch 2.x it is also torch.distributed.DistBackendError, what torch's own backends raise.
_DIST_ERROR = getattr(dist, "DistBackendError", None)
_error_types = {}


def torch_error(error):
    if _DIST_ERROR is None or not isinstance(error, CerarError) or isinstance(error, _DIST_ERROR):
        return error
    kind = type(error)
    mixed = _error_types.get(kind)
    if mixed is None:
        mixed = _error_types[kind] = type(kind.__name__, (kind, _DIST_ERROR),
                                          {"__module__": kind.__module__})
    out = mixed(str(error))
    for attribute in ("peer", "code"):
        if hasattr(error, attribute):
            setattr(out, attribute, getattr(error, attribute))
    out.__cause__ = error
    return out


# --- Work objects -------------------------------------------------------------------------------
def _raise(future):
    # A Python future's set_exception stores the error as its value (only Python's wait()
    # raises it); waiting here turns it into the continuation's error, which DDP's reducer
    # (C++) sees.
    return future.wait()


class _Work(_c10d.Work):
    """A collective in flight: wait() raises its error (the Work that torch makes from a future
    returns True even then, in 1.13 and 2.15), get_future() completes with the tensors or the
    error.

    torch 1.13 does not keep a Python Work alive for its C++ callers (DDP's), which would then
    wait on the base class forever: the group holds each Work until it is done and someone
    has waited on it or taken its future."""

    def __init__(self, future, held):
        super().__init__()
        self._future = future
        self._chained = future.then(_raise)
        self._used = False
        held.append(self)

    def wait(self, timeout=None):
        self._used = True
        self._future.wait()  # raises the collective's error, of its own type
        self._chained.wait()  # so that get_future() is done once wait() returns
        return True

    def get_future(self):
        self._used = True
        return self._chained

    def is_completed(self):
        return self._future.done()

    def result(self):
        self._used = True
        return self._future.wait()

    def _done_with(self):
        return self._used and self._future.done()


_MAX_HELD = 4096


class _Completer:
    """One per process group: completes the group's Work objects in submission order on a
    helper thread (cerar.torch._completer), so that neither torch's thread nor the runtime's
    waits; keeps the Work objects torch 1.13 would drop (below)."""

    def __init__(self):
        self._thread = Completer("cerar-dist-futures", torch_error)
        self._held = []
        self._lock = threading.Lock()

    def work(self, finish, tensors):
        devices = sorted({t.device for t in tensors if t.device.type != "cpu"}, key=str)
        future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        with self._lock:
            held = [w for w in self._held if not w._done_with()]
            if len(held) > _MAX_HELD:  # done and never looked at (async_op=True, dropped)
                keep_from = len(held) - _MAX_HELD
                held = [w for i, w in enumerate(held) if i >= keep_from or not w.is_completed()]
            self._held = held
            work = _Work(future, self._held)
        self._thread.submit(finish, future)
        return work

    def close(self):
        self._thread.close(timeout=30)
