"""cerar: Horovod-style tensor fusion whose all-reduce is CERAR, an approximate
communication-efficient ring (or the exact ring).

    import cerar
    cerar.init()                      # reads CERAR_* (cerarrun), torchrun's, Open MPI's or SLURM's
    print(cerar.rank(), cerar.size())

Framework APIs: cerar.numpy, cerar.torch, cerar.jax. Launcher: ``cerarrun -np 4 python train.py``.
"""
import atexit
import itertools
import threading


def _load_torchs_nccl_first():
    """PyPI's torch brings its own NCCL (the nvidia-nccl package) and cannot load once another
    NCCL with the same soname is in the process, which a CUDA build of the extension would put
    there first. Loading torch's globally before the extension makes both use it (the
    extension links NCCL by soname and uses only its stable API)."""
    import ctypes
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return
    for folder in (spec.submodule_search_locations or []) if spec else []:
        library = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(library):
            try:
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
            return


_load_torchs_nccl_first()

from cerar._cerar import (CerarError, CerarTimeoutError, InternalError,  # noqa: E402
                          InvalidArgumentError, MismatchError, Op, PeerLostError, ShutDownError)

# Every failure raises a subclass of CerarError (a RuntimeError); `.peer` names the rank it
# concerns (or None) and `.code` the kind. See docs/errors.md.
ERRORS = ("CerarError", "CerarTimeoutError", "PeerLostError", "MismatchError", "ShutDownError",
          "InvalidArgumentError", "InternalError")

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
    "start_timeline", "stop_timeline", "stats", "Op", "Sum", "Average", "Min", "Max",
    *ERRORS,
]
__version__ = "0.1.0"

Sum = Op.Sum
Average = Op.Average
Min = Op.Min
Max = Op.Max

_lock = threading.Lock()
_runtime = None
_counters = {}


def init(**overrides):
    """Starts the runtime (connects to the other ranks); a no-op when already started.

    The configuration comes from the environment (RuntimeConfig::fromEnvironment); keyword
    arguments override its fields, e.g. ``init(algorithm="ring", fusion_threshold_bytes=1 << 20)``.
    Raises CerarError when a setting is bad or the other ranks cannot be reached.
    """
    global _runtime
    from cerar import _cerar
    with _lock:
        if _runtime is not None:
            return
        config = _cerar.RuntimeConfig.from_environment()
        for key, value in overrides.items():
            if key.startswith("_") or not hasattr(config, key):
                raise TypeError(f"cerar.init: unknown setting {key!r}")
            setattr(config, key, value)
        _runtime = _cerar.Runtime.start(config)
        _counters.clear()


def shutdown():
    """Stops the runtime; pending operations fail with ShutDownError. Idempotent."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.shutdown()


def is_initialized():
    return _runtime is not None


def _rt():
    runtime = _runtime
    if runtime is None:
        raise ValueError("cerar has not been initialized; call cerar.init() first")
    return runtime


def size():
    return _rt().size


def rank():
    return _rt().rank


def local_rank():
    return _rt().local_rank


def local_size():
    return _rt().local_size


def start_timeline(path):
    """Starts writing a chrome://tracing timeline to `path`."""
    _rt().start_timeline(str(path))


def stop_timeline():
    _rt().stop_timeline()


def stats():
    """The runtime's counters (cycles, cache hits, fused buffers, bytes sent, ...) as a dict."""
    return _rt().stats()


def _auto_name(kind, name=None):
    """`name`, or a deterministic one: "<kind>.noname.<n>", counted per kind since init().

    Every rank must make its unnamed calls in the same order, as with Horovod.
    """
    if name is not None:
        return str(name)
    with _lock:
        counter = _counters.setdefault(kind, itertools.count())
        return f"{kind}.noname.{next(counter)}"


atexit.register(shutdown)
