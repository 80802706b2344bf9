"""cerar.keras on Keras's torch backend: Keras's train step runs eagerly (loss.backward(), then
optimizer.apply), so the gradients go through cerar.torch's grouped all-reduce, in place (by
address, no copy) unless compressed."""
import cerar.torch as _torch_layer
from cerar._process_sets import set_argument as _set
from cerar.keras._reducer import ScaledReducer
from cerar.torch.compression import Compression, NoneCompressor  # noqa: F401

barrier, shutdown = _torch_layer.barrier, _torch_layer.shutdown


def join():
    return _torch_layer.join()


class Reducer(ScaledReducer):
    """The dense gradients as one fused grouped all-reduce; None stays None."""

    def reduce(self, grads, variables):
        present = [i for i, g in enumerate(grads) if g is not None]
        tensors = [grads[i] for i in present]
        out = list(grads)
        if not tensors:
            return out
        # One name, reused every step (one step's reduction at a time). Uncompressed, in place:
        # Keras's step zeroes the gradients before the next backward pass anyway.
        if self.compression is NoneCompressor:
            _torch_layer.grouped_allreduce_(
                tensors, name="keras.gradients", op=self.op, prescale_factor=self.prescale,
                postscale_factor=self.postscale, process_set=self.process_set)
            return out
        reduced = _torch_layer.grouped_allreduce(
            tensors, name="keras.gradients", op=self.op, compression=self.compression,
            prescale_factor=self.prescale, postscale_factor=self.postscale,
            process_set=self.process_set)
        for i, r in zip(present, reduced):
            out[i] = r
        return out


make_reducer = Reducer


def allreduce(tensor, op, name, process_set, compression, prescale_factor, postscale_factor):
    return _torch_layer.allreduce(tensor, name=name, op=op, process_set=_set(process_set),
                                  compression=compression, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor)


def allgather(tensor, name, process_set):
    return _torch_layer.allgather(tensor, name=name, process_set=_set(process_set))


def broadcast(tensor, root_rank, name, process_set):
    return _torch_layer.broadcast(tensor, root_rank, name=name, process_set=_set(process_set))


def wait():
    """Nothing pending: torch's collectives here are synchronous."""
