"""DistributedOptimizer: averages gradients across ranks while backward() still runs.

Each parameter gets a hook that fires once its gradient has been accumulated and launches that
gradient's all-reduce at once, so communication overlaps the rest of the backward pass (the
runtime fuses what is ready together). step() first waits for them all (synchronize()).
"""
import contextlib
import warnings

import torch

from cerar import Average, Sum
from cerar.torch._compat import on_gradient_ready


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, op, backward_passes_per_step,
                 gradient_predivide_factor, resync_every=0):
        super(self.__class__, self).__init__(params)
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if named and not isinstance(named[0], tuple):
                raise ValueError("named_parameters must be (name, parameter) pairs, as from "
                                 "model.named_parameters()")
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("named_parameters holds duplicate names")
            by_id = {id(p): n for n, p in named}
            unnamed = [p for p in all_params if id(p) not in by_id]
            if unnamed:
                raise ValueError(f"{len(unnamed)} optimizer parameters are missing from "
                                 "named_parameters")
        else:
            by_id = {id(p): f"noname.{i}" for i, p in enumerate(all_params)}
        if op not in (Average, Sum) and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor needs op=Average or op=Sum")
        self._names = {p: f"allreduce.{by_id[id(p)]}" for p in all_params}
        # The order in which missing gradients are reduced: by name, the same on every rank.
        self._ordered = sorted((p for p in all_params if p.requires_grad),
                               key=lambda p: self._names[p])
        self._op = op
        self._passes = int(backward_passes_per_step)
        self._predivide = float(gradient_predivide_factor)
        self._delay = {p: self._passes for p in self._ordered}
        self._handles = {}  # parameter -> (Handle or None, contiguous copy or None)
        self._hook_refs = []
        self._synchronized = False
        self._should_synchronize = True
        if resync_every < 0:
            raise ValueError("resync_every must be >= 0")
        self._resync_every = int(resync_every)
        self._steps = 0
        # Every parameter the optimizer updates, named as the all-reduces (same on every rank).
        self._resync_items = [(self._names[p], p) for p in all_params]
        import cerar.torch as ct
        self._ct = ct
        self._register_hooks()

    def _register_hooks(self):
        for p in self._ordered:
            self._hook_refs.append(on_gradient_ready(p, self._make_hook(p)))

    def _make_hook(self, p):
        def hook():
            handle = self._handles.get(p, (None, None))[0]
            if handle is not None and self._delay[p] <= 0:
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step times before "
                    "step() or synchronize(); raise backward_passes_per_step to accumulate")
            self._delay[p] -= 1
            entry = (None, None)
            if self._delay[p] == 0:
                entry = self._launch(p)
            self._handles[p] = entry
        return hook

    def _launch(self, p):
        grad = p.grad
        if grad.is_sparse:
            raise ValueError(f"{self._names[p]}: sparse gradients are not supported")
        copy = None if grad.is_contiguous() else grad.contiguous()
        tensor = grad if copy is None else copy
        op, prescale, postscale = self._op, 1.0, 1.0
        if self._predivide != 1.0:
            prescale, postscale = 1.0 / self._predivide, self._predivide
        handle = self._ct.allreduce_async_(tensor, name=self._names[p], op=op,
                                           prescale_factor=prescale, postscale_factor=postscale)
        return handle, copy

    def synchronize(self):
        """Waits for every gradient's all-reduce. Parameters that got no gradient on this rank
        contribute zeros (in name order), so the other ranks never wait for them."""
        for p in self._ordered:
            handle = self._handles.get(p, (None, None))[0]
            if handle is None:
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                self._handles[p] = self._launch(p)
        for p, (handle, copy) in self._handles.items():
            self._ct.synchronize(handle)
            if copy is not None:
                p.grad.copy_(copy)
            self._delay[p] = self._passes
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called after optimizer.synchronize() without "
                              "optimizer.skip_synchronize(): the gradients are reduced twice")
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        self._steps += 1
        if self._resync_every and self._steps % self._resync_every == 0:
            # CERAR's replicas drift apart by about its error per step; rank 0's copy wins.
            self._ct.resync_parameters(self._resync_items, prefix="resync")
        return result

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, op=Average,
                         backward_passes_per_step=1, gradient_predivide_factor=1.0,
                         resync_every=0):
    """Wraps `optimizer` so that step() applies the gradients reduced (averaged by default)
    over all ranks. The result is an instance of the optimizer's own class (schedulers work)
    with the same parameter groups and state.

    named_parameters: model.named_parameters(), to name the all-reduces (recommended);
    without it parameters are named by position. backward_passes_per_step: backward passes
    accumulated locally before the reduction. gradient_predivide_factor: divides before the
    sum and multiplies after (the result is the same average; for float16 range).
    resync_every: with K > 0, every K-th step() ends by broadcasting rank 0's parameters, so
    CERAR's replica drift (docs/fidelity.md) never accumulates over more than K steps.
    """
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    wrapped = cls(optimizer.param_groups, named_parameters, op, backward_passes_per_step,
                  gradient_predivide_factor, resync_every)
    if optimizer.state:
        wrapped.load_state_dict(optimizer.state_dict())
    return wrapped
