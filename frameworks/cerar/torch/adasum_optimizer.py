"""DistributedOptimizer(..., op=Adasum): Horovod's delta optimizer.

With Adasum the ranks do not combine gradients: each rank takes its wrapped optimizer's step
locally, and the steps (delta = new parameter - old parameter) are combined with Adasum, so
optimizers whose step is not linear in the gradient (momentum, Adam) see their own rank's
gradient, as the Adasum paper prescribes. step() snapshots the parameters, runs the wrapped
optimizer once on all of them, launches one Adasum all-reduce per parameter (named after it,
in name order, fused by the runtime with per-tensor dot products), and sets each parameter to
its snapshot plus the combined delta. Gradients accumulate locally between steps, so any
number of backward passes may precede a step(); synchronize() has nothing to do.
"""
import contextlib

import torch

from cerar import Adasum


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, names, compression):
        super(self.__class__, self).__init__(params)
        self._names = names  # parameter -> the name of its all-reduce, the same on every rank
        self._ordered = sorted((p for p in names if p.requires_grad), key=names.get)
        self._compression = compression
        import cerar.torch as ct
        self._ct = ct

    def synchronize(self):
        """Nothing to wait for: the deltas are combined inside step()."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("skip_synchronize() has no meaning with op=Adasum: step() "
                             "combines the local steps, not the gradients")
        yield  # noqa: unreachable; makes this a generator

    def step(self, closure=None):
        starts = [p.detach().clone() for p in self._ordered]
        loss = super(self.__class__, self).step(closure)
        launched, combined = [], []
        with torch.no_grad():
            try:
                for p, start in zip(self._ordered, starts):
                    delta = (p.detach() - start).contiguous()
                    wire, context = self._compression.compress(delta)
                    handle = self._ct.allreduce_async_(wire.contiguous(), name=self._names[p],
                                                       op=Adasum)
                    launched.append((handle, context))
                for handle, context in launched:
                    combined.append(self._compression.decompress(self._ct.synchronize(handle),
                                                                 context))
            except BaseException:
                # A failed combination (e.g. a non-power-of-two job) leaves the parameters as
                # they were before the step, on every rank alike.
                for p, start in zip(self._ordered, starts):
                    p.copy_(start)
                raise
            for p, start, delta in zip(self._ordered, starts, combined):
                p.copy_(start + delta.to(p.dtype))
        return loss


def adasum_optimizer(optimizer, names, compression):
    """The wrapped optimizer of op=Adasum (an instance of the optimizer's own class)."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedAdasumOptimizer.__dict__))
    wrapped = cls(optimizer.param_groups, names, compression)
    if optimizer.state:
        wrapped.load_state_dict(optimizer.state_dict())
    return wrapped
