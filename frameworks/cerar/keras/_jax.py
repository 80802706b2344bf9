"""cerar.keras on Keras's JAX backend: Keras jits its train step (jit_compile, the default
there), and optimizer.apply runs inside it, so the gradients go through cerar.jax's
allreduce_tree on its jit path: one ordered host callback per step carrying every gradient
(cerar/_jax_jit.py). Run eagerly (jit_compile=False) the same call reduces at once."""
import jax
import jax.numpy as jnp

import cerar.jax as _jax_layer
from cerar._process_sets import set_argument as _set
from cerar.keras._reducer import ScaledReducer
from cerar._compression import Compressor, NoneCompressor

barrier, join, shutdown = _jax_layer.barrier, _jax_layer.join, _jax_layer.shutdown


class FP16Compressor(Compressor):
    """Floating arrays travel as float16 (cast inside the jitted step)."""

    @staticmethod
    def compress(tensor):
        if jnp.issubdtype(tensor.dtype, jnp.floating) and tensor.dtype != jnp.float16:
            return tensor.astype(jnp.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """The compressors by name, as ``Compression.fp16`` in Horovod code."""
    none = NoneCompressor
    fp16 = FP16Compressor


class Reducer(ScaledReducer):
    def reduce(self, grads, variables):
        present = [i for i, g in enumerate(grads) if g is not None]
        pairs = [self.compression.compress(grads[i]) for i in present]
        reduced = _jax_layer.allreduce_tree([w for w, _ in pairs], op=self.op,
                                            name="keras.gradients",
                                            prescale_factor=self.prescale,
                                            postscale_factor=self.postscale,
                                            process_set=self.process_set) if present else []
        out = list(grads)
        for i, r, (_, ctx) in zip(present, reduced, pairs):
            out[i] = self.compression.decompress(r, ctx)
        return out


make_reducer = Reducer


def allreduce(tensor, op, name, process_set, compression, prescale_factor, postscale_factor):
    wire, ctx = compression.compress(jnp.asarray(tensor))
    out = _jax_layer.allreduce(wire, op=op, name=name, prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor, process_set=_set(process_set))
    return compression.decompress(out, ctx)


def allgather(tensor, name, process_set):
    return _jax_layer.allgather(jnp.asarray(tensor), name=name, process_set=_set(process_set))


def broadcast(tensor, root_rank, name, process_set):
    return _jax_layer.broadcast(jnp.asarray(tensor), root_rank, name=name,
                                process_set=_set(process_set))


def wait():
    """The collectives of the jitted steps dispatched so far have run (their errors raised)."""
    jax.effects_barrier()
