"""cerar: Horovod-style tensor fusion whose all-reduce is CERAR, an approximate
communication-efficient ring (or the exact ring).

    import cerar
    cerar.init()                      # reads CERAR_* (cerarrun), torchrun's, Open MPI's or SLURM's
    print(cerar.rank(), cerar.size())

Framework APIs: cerar.numpy, cerar.torch, cerar.jax. Launcher: ``cerarrun -np 4 python train.py``.
"""
import atexit

from cerar._cerar import (CerarError, CerarTimeoutError, InternalError,  # noqa: E402
                          InvalidArgumentError, MismatchError, Op, PeerLostError, ShutDownError)


def _nccl_folders():
    """The lib folders of the nvidia-nccl wheels on sys.path (PyPI's torch depends on one):
    searched first when CUDA tensors need NCCL, so cerar and torch share one libnccl.so.2."""
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return []
    folders = (spec.submodule_search_locations or []) if spec else []
    return [os.path.join(f, "lib") for f in folders if os.path.isdir(os.path.join(f, "lib"))]


def _tell_where_nccl_is():
    from cerar import _cerar
    _cerar.set_nccl_search_folders(_nccl_folders())


_tell_where_nccl_is()

# Every failure raises a subclass of CerarError (a RuntimeError); `.peer` names the rank it
# concerns (or None) and `.code` the kind. See docs/errors.md.
ERRORS = ("CerarError", "CerarTimeoutError", "PeerLostError", "MismatchError", "ShutDownError",
          "InvalidArgumentError", "InternalError")

# Build and capability flags (defined below), as Horovod names them, answering for this build:
# collectives run over Gloo (TCP) links and, in CUDA builds, NCCL; no MPI, CCL, DDL or ROCm.
BUILD_FLAGS = ("gloo_built", "gloo_enabled", "nccl_built", "cuda_built", "rocm_built",
               "mpi_built", "mpi_enabled", "mpi_threads_supported", "ccl_built", "ddl_built")

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank", "local_size",
    "start_timeline", "stop_timeline", "stats", "Op", "Sum", "Average", "Min", "Max", "Adasum", "Product",
    "cross_rank", "cross_size", "is_homogeneous", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", *BUILD_FLAGS, *ERRORS,
]
__version__ = "0.1.0"

Sum = Op.Sum
Average = Op.Average
Min = Op.Min
Max = Op.Max
# Adaptive summation (docs/adasum.md): floating tensors, a power-of-two number of ranks.
Adasum = Op.Adasum


class _FrameworkOp:
    """A reduction the framework modules carry out themselves (Product: from an allgather,
    exact for every dtype), since the runtime's ring knows only sum, min and max."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"cerar.{self.name}"


Product = _FrameworkOp("Product")



def gloo_built():
    return True


def gloo_enabled():
    return True


def nccl_built():
    """0 without usable NCCL; else NCCL's version code (e.g. 22809 for 2.28.9), as Horovod
    answers, of the libnccl.so.2 that cerar loads at run time for CUDA tensors."""
    from cerar import _cerar
    return _cerar.nccl_version()[0]


def cuda_built():
    from cerar import _cerar
    return bool(_cerar.cuda_built)


def rocm_built():
    return False


def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def ccl_built():
    return False


def ddl_built():
    return False

from cerar import _metrics, _state  # noqa: E402
from cerar._frontend import auto_name as _auto_name, counters as _counters  # noqa: E402,F401
from cerar._process_sets import (ProcessSet, _register_static, add_process_set,  # noqa: E402,F401
                                 global_process_set, remove_process_set)
from cerar._state import current as _rt  # noqa: E402

def init(process_sets=None, **overrides):
    """Starts the runtime (connects to the other ranks); a no-op when already started.

    The configuration comes from the environment (RuntimeConfig::fromEnvironment); keyword
    arguments override its fields, e.g. ``init(algorithm="ring", fusion_threshold_bytes=1 << 20)``.
    ``process_sets``: ProcessSet objects to register on every rank (the same list everywhere),
    or "dynamic" to allow add_process_set/remove_process_set (docs/process-sets.md).
    Raises CerarError when a setting is bad or the other ranks cannot be reached.
    """
    from cerar import _cerar
    from cerar.elastic import worker as _elastic_worker
    # Under cerarrun's elastic driver the identity comes from the newest generation's plan.
    if "rendezvous_scope" not in overrides and _elastic_worker.enabled() and not is_initialized():
        return _elastic_worker.current().start(init, process_sets, overrides)
    with _state.lock:
        if _state.runtime is not None:
            return
        config = _cerar.RuntimeConfig.from_environment()
        for key, value in overrides.items():
            if key.startswith("_") or not hasattr(config, key):
                raise TypeError(f"cerar.init: unknown setting {key!r}")
            setattr(config, key, value)
        if isinstance(process_sets, str):
            if process_sets != "dynamic":
                raise ValueError(f"cerar.init: process_sets must be a list or 'dynamic', "
                                 f"got {process_sets!r}")
            config.dynamic_process_sets, process_sets = True, None
        # Bound first: a port in use fails this rank before it joins the others.
        exporter = _metrics.bind(config.metrics_port, config.local_rank)
        try:
            runtime = _state.runtime = _cerar.Runtime.start(config)
        except BaseException:
            if exporter is not None:
                exporter.close()
            raise
        _counters.clear()
        try:
            _register_static(runtime, process_sets or [])
        except BaseException:
            _state.runtime = None
            runtime.shutdown()
            if exporter is not None:
                exporter.close()
            raise
        if exporter is not None:
            exporter.start(runtime)
            _state.exporter = exporter


def shutdown():
    """Stops the runtime; pending operations fail with ShutDownError. Idempotent."""
    with _state.lock:
        runtime, _state.runtime = _state.runtime, None
        exporter, _state.exporter = _state.exporter, None
    if exporter is not None:
        exporter.close()
    if runtime is not None:
        runtime.shutdown()


def is_initialized():
    return _state.runtime is not None


def __getattr__(name):
    if name == "_runtime":  # the running runtime (or None), read where it is held
        return _state.runtime
    raise AttributeError(f"module 'cerar' has no attribute {name!r}")


def size():
    return _rt().size


def rank():
    return _rt().rank


def local_rank():
    return _rt().local_rank


def local_size():
    return _rt().local_size


def cross_rank():
    """This rank's index among the ranks that have its local rank (one per host), as the ranks
    agreed at init where each runs."""
    return _rt().cross_rank


def cross_size():
    """The number of ranks that have this rank's local rank (the hosts, when homogeneous)."""
    return _rt().cross_size


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return _rt().is_homogeneous


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the timeline (docs/timeline.md) to `file_path`, as Horovod's: rank 0
    writes it ("{rank}" in the path: every rank its own); `mark_cycles`: a CYCLE_START mark at
    each cycle."""
    _rt().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Ends the timeline's file as a complete JSON array."""
    _rt().stop_timeline()


def stats():
    """The runtime's counters (cycles, cache hits, fused buffers, bytes sent, ...) as a dict."""
    return _rt().stats()


atexit.register(shutdown)
