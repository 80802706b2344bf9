"""Collectives on torch tensors, Horovod's API (works with torch 1.13 and 2.x).

    import cerar.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Tensors are passed by address (zero-copy; CPU or CUDA, any contiguous layout; bfloat16 too).
Out-of-place calls return new tensors; the ones ending in "_" work in place. Unnamed calls
get "<op>.noname.<n>" in call order, which must then be the same on every rank.
"""
import torch

from cerar import (Adasum, Average, CerarError, CerarTimeoutError, InternalError,  # noqa: F401
                   InvalidArgumentError, Max, Min, MismatchError, Op, PeerLostError, Product,
                   ShutDownError, Sum, cross_rank, cross_size, init, is_homogeneous,
                   is_initialized, local_rank, local_size, rank, shutdown, size,
                   start_timeline, stop_timeline, stats)
# Build and capability flags, answering for this build (cerar/__init__.py).
from cerar import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: F401
                   mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rocm_built)
from cerar import _frontend
from cerar._frontend import barrier  # noqa: F401
from cerar._handle import Handle, poll, synchronize
from cerar._process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                 global_process_set, remove_process_set)

# Horovod code catches HorovodInternalError when a collective fails (elastic training restores
# its state then); Horovod raises it for every failed collective, so here it is CerarError
# itself: a lost peer (PeerLostError) and a silent one (CerarTimeoutError) are instances.
HorovodInternalError = CerarError

from cerar.torch.ops import (allgather_async,  # noqa: E402,F401
                             allreduce_async, allreduce_async_, alltoall_async, broadcast_async,
                             broadcast_async_, grouped_allgather_async, grouped_allreduce_async,
                             grouped_allreduce_async_, grouped_reducescatter_async,
                             reducescatter_async, sparse_allreduce_async)
from cerar.torch.autograd import (allgather, allreduce, alltoall, broadcast,  # noqa: E402
                                  grouped_allgather, grouped_allreduce, grouped_reducescatter,
                                  reducescatter)
from cerar.torch.compression import Compression  # noqa: E402
from cerar.torch import elastic  # noqa: E402,F401


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def join(device=-1):
    """This rank has no more data; returns the rank that joined last once all have joined.
    `device` is Horovod's, unused: the runtime serves every device."""
    return _frontend.join()


from cerar.torch.functions import (allgather_object, broadcast_object,  # noqa: E402
                                   broadcast_optimizer_state, broadcast_parameters)
from cerar.torch.drift import (DriftControl, drift_stats, parameter_drift,  # noqa: E402
                               resync_parameters)
from cerar.torch.optimizer import DistributedOptimizer  # noqa: E402
from cerar.torch.ddp import CerarHookState, cerar_hook, register_cerar_hook  # noqa: E402,F401
from cerar.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402


# torch.distributed's backend "cerar": registered here, so that `import cerar.torch` and
# `dist.init_process_group("cerar")` suffice on every torch that can host it (cerar.torch.backend).
if torch.distributed.is_available():
    from cerar.torch import backend as _backend  # noqa: E402

    if _backend.missing_api() is None:
        _backend.register_backend()
    register_backend = _backend.register_backend
else:
    def register_backend():
        raise RuntimeError("cerar: the torch.distributed backend needs torch.distributed, "
                           "which this build of torch lacks")
