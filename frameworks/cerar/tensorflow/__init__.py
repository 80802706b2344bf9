"""Collectives on TensorFlow 2 tensors, Horovod's API (`import cerar.tensorflow as hvd`).

    hvd.init()
    tape = hvd.DistributedGradientTape(tape)       # gradients averaged across ranks
    hvd.broadcast_variables(model.variables, root_rank=0)

Tensors travel through host memory (numpy), eagerly or inside tf.function, where each
collective is one Python op (docs/tensorflow.md says what that costs); not inside
tf.function(jit_compile=True). Unnamed calls get "<op>.noname.<n>" in call order (inside
tf.function: in tracing order), which must then be the same on every rank.
"""
_MINIMUM = (2, 16)  # Keras 3 is TensorFlow's Keras from 2.16 on


def _import_tensorflow():
    try:
        import tensorflow
    except ImportError as error:
        raise ImportError("cerar.tensorflow needs TensorFlow >= 2.16 (pip install "
                          f"tensorflow-cpu or tensorflow), which does not import: {error}") \
            from error
    found = tuple(int(p) for p in tensorflow.__version__.split(".")[:2] if p.isdigit())
    if found < _MINIMUM:
        raise ImportError(f"cerar.tensorflow needs TensorFlow >= 2.16, found "
                          f"{tensorflow.__version__}")


_import_tensorflow()

from cerar import (Adasum, Average, CerarError, CerarTimeoutError, InternalError,  # noqa: E402,F401
                   InvalidArgumentError, Max, Min, MismatchError, PeerLostError, Product,
                   ShutDownError, Sum, cross_rank, cross_size, init, is_homogeneous,
                   is_initialized, local_rank, local_size, rank, shutdown, size,
                   start_timeline, stop_timeline)
from cerar import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: E402,F401
                   mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rocm_built)
from cerar._frontend import barrier  # noqa: E402,F401
from cerar._frontend import join as _join  # noqa: E402
from cerar._process_sets import (ProcessSet, add_process_set,  # noqa: E402,F401
                                 global_process_set, remove_process_set)
from cerar.tensorflow import elastic, util  # noqa: E402,F401
from cerar.tensorflow.util import _executing_eagerly  # noqa: E402,F401
from cerar.tensorflow.compression import Compression  # noqa: E402,F401
from cerar.tensorflow.ops import (allgather, allreduce, alltoall, broadcast,  # noqa: E402,F401
                                  broadcast_, grouped_allgather, grouped_allreduce,
                                  grouped_reducescatter, reducescatter)
from cerar.tensorflow.functions import (allgather_object, broadcast_object,  # noqa: E402,F401
                                        broadcast_object_fn, broadcast_variables,
                                        local_rank_op, local_size_op, rank_op, size_op)
from cerar.tensorflow.gradient_tape import (DistributedGradientTape,  # noqa: E402,F401
                                            PartialDistributedGradientTape)
from cerar.tensorflow.optimizer import DistributedOptimizer  # noqa: E402,F401
from cerar.tensorflow.sessions import (BroadcastGlobalVariablesHook,  # noqa: E402,F401
                                       broadcast_global_variables)
from cerar.tensorflow.sync_batch_normalization import SyncBatchNormalization  # noqa: E402,F401

# Horovod code catches HorovodInternalError when a collective fails (as cerar.torch's).
HorovodInternalError = CerarError


def join():
    """This rank has no more data; returns the rank that joined last once all have joined."""
    return _join()
