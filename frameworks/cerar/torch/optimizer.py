"""DistributedOptimizer: averages gradients across ranks while backward() still runs.

Each parameter gets a hook that fires once its gradient has been accumulated and launches that
gradient's all-reduce at once, so communication overlaps the rest of the backward pass (the
runtime fuses what is ready together). step() first waits for them all (synchronize()).
"""
import contextlib
import warnings

import torch

from cerar import Adasum, Average, Sum
from cerar._handle import Handle
from cerar.torch._compat import on_gradient_ready
from cerar.torch.compression import Compression, runtime_wire


def _make_groups(groups, ordered):
    """Explicit groups, each reduced as one grouped call once all its gradients are ready:
    an int n cuts the parameters (in name order) into n groups; a list of lists of parameters
    is taken as given (parameters in none are reduced one by one)."""
    if groups is None or groups == 0:
        return []
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError("groups must be a non-negative int or a list of lists of parameters")
        n = min(groups, len(ordered))
        return [ordered[i * len(ordered) // n:(i + 1) * len(ordered) // n] for i in range(n)]
    order = {p: i for i, p in enumerate(ordered)}
    out = []
    for group in groups:
        members = sorted((p for p in group if p in order), key=order.get)
        if members:
            out.append(members)
    if len({p for g in out for p in g}) != sum(len(g) for g in out):
        raise ValueError("a parameter is in more than one group")
    return out


def _names_by_id(named_parameters, all_params):
    """id(parameter) -> its name (named_parameters checked against the optimizer's
    parameters), or "noname.<i>" in the optimizer's order without names."""
    if named_parameters is None:
        return {id(p): f"noname.{i}" for i, p in enumerate(all_params)}
    named = list(named_parameters)
    if named and not isinstance(named[0], tuple):
        raise ValueError("named_parameters must be (name, parameter) pairs, as from "
                         "model.named_parameters()")
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError("named_parameters holds duplicate names")
    by_id = {id(p): n for n, p in named}
    if len(by_id) != len(named):
        raise ValueError("named_parameters holds a parameter twice")
    unnamed = [p for p in all_params if id(p) not in by_id]
    if unnamed:
        raise ValueError(f"{len(unnamed)} optimizer parameters are missing from "
                         "named_parameters")
    return by_id


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, op, backward_passes_per_step,
                 gradient_predivide_factor, resync_every=0, compression=None, groups=None,
                 sparse_as_dense=False, drift_check_every=None, drift_tolerance=None,
                 process_set=None):
        super(self.__class__, self).__init__(params)
        # Gradients are reduced among the set's ranks; a rank outside it steps on its own
        # gradients (as Horovod's).
        self._process_set = process_set
        all_params = [p for group in self.param_groups for p in group["params"]]
        by_id = _names_by_id(named_parameters, all_params)
        if op not in (Average, Sum) and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor needs op=Average or op=Sum")
        self._names = {p: f"allreduce.{by_id[id(p)]}" for p in all_params}
        self._parameter_names = {p: by_id[id(p)] for p in all_params}
        # The order in which missing gradients are reduced: by name, the same on every rank.
        self._ordered = sorted((p for p in all_params if p.requires_grad),
                               key=lambda p: self._names[p])
        self._op = op
        self._passes = int(backward_passes_per_step)
        self._predivide = float(gradient_predivide_factor)
        self._delay = {p: self._passes for p in self._ordered}
        self._handles = {}  # parameter -> (Handle or sparse result or None, finish or None)
        self._compression = compression or Compression.none
        self._sparse_as_dense = bool(sparse_as_dense)
        self._groups = _make_groups(groups, self._ordered)
        self._group_of = {p: i for i, group in enumerate(self._groups) for p in group}
        self._waiting = [set(group) for group in self._groups]
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
        self.drift_control = ct.DriftControl(self._resync_items, self, drift_check_every,
                                             drift_tolerance)
        self._register_hooks()

    def _register_hooks(self):
        if self._process_set is not None and not self._process_set.included():
            return
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
            self._handles[p] = (None, None)
            if self._delay[p] == 0:
                self._ready(p)
        return hook

    def _ready(self, p):
        """p's gradient is final: reduce it, or its group once the whole group is final."""
        group = self._group_of.get(p)
        if group is None:
            self._handles[p] = self._launch([p])[0]
            return
        self._waiting[group].discard(p)
        if not self._waiting[group]:
            members = self._groups[group]
            for q, entry in zip(members, self._launch(members, f"allreduce.group.{group}")):
                self._handles[q] = entry
            self._waiting[group] = set(members)

    def _scaling(self):
        if self._predivide != 1.0:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _launch(self, params, group_name=None):
        """Starts the reduction of these parameters' gradients (one grouped call for a group);
        returns one (handle, finish) per parameter, finish(result) storing it in p.grad."""
        prescale, postscale = self._scaling()
        if len(params) == 1 and params[0].grad.is_sparse and not self._sparse_as_dense:
            p = params[0]
            if self._op not in (Average, Sum):
                raise ValueError(f"{self._names[p]}: sparse gradients need op=Average or Sum")
            result = self._ct.sparse_allreduce_async(p.grad, self._names[p], self._op,
                                                     process_set=self._process_set)
            return [(result, lambda reduced, p=p: setattr(p, "grad", reduced))]
        wires, finishes = [], []
        denses = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in params]
        # fp16/bf16 of float32 CPU gradients: the runtime's 16-bit wire instead of a cast here.
        fmt = runtime_wire(self._compression, denses) if self._op in (Average, Sum) else None
        compression = Compression.none if fmt else self._compression
        for p, dense in zip(params, denses):
            grad = p.grad
            sparse = grad.is_sparse
            wire, context = compression.compress(dense)
            wire = wire.contiguous()
            wires.append(wire)

            def finish(reduced, p=p, context=context, sparse=sparse, wire_in_place=wire is grad):
                out = compression.decompress(reduced, context)
                if sparse:  # the optimizer gets the gradient's own layout back
                    p.grad = out.to_sparse()
                elif not wire_in_place:
                    p.grad.copy_(out)
            finishes.append(finish)
        if group_name is None:
            handle = self._ct.allreduce_async_(wires[0], name=self._names[params[0]],
                                               op=self._op, prescale_factor=prescale,
                                               postscale_factor=postscale,
                                               process_set=self._process_set, wire=fmt)
            return [(handle, finishes[0])]
        handle = self._ct.grouped_allreduce_async_(wires, name=group_name, op=self._op,
                                                   prescale_factor=prescale,
                                                   postscale_factor=postscale,
                                                   process_set=self._process_set, wire=fmt)
        return [(handle, lambda reduced, i=i, f=f: f(reduced[i]))
                for i, f in enumerate(finishes)]

    def synchronize(self):
        """Waits for every gradient's all-reduce. Parameters that got no gradient on this rank
        contribute zeros (in name order), so the other ranks never wait for them."""
        if self._process_set is not None and not self._process_set.included():
            self._synchronized = True
            return
        for p in self._ordered:
            if self._handles.get(p, (None, None))[0] is None:
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                self._delay[p] = 0
                self._ready(p)
        for p, (handle, finish) in self._handles.items():
            if isinstance(handle, Handle):
                result = self._ct.synchronize(handle)
            else:
                result = handle()  # a sparse reduction's result
            finish(result)
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
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(): the gradients are "
                              "reduced twice")
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        self._steps += 1
        if self._resync_every and self._steps % self._resync_every == 0:
            # CERAR's replicas drift apart by about its error per step; rank 0's copy wins.
            self._ct.resync_parameters(self._resync_items, prefix="resync")
        self.drift_control.after_step()
        return result

    def _forget_pending(self):
        """Drops the reductions in flight (elastic training: they failed with the runtime that
        a reset replaced), so that the step redone after the reset starts clean."""
        self._handles.clear()
        self._delay = {p: self._passes for p in self._ordered}
        self._waiting = [set(group) for group in self._groups]
        self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None,
                         resync_every=0, drift_check_every=None, drift_tolerance=None):
    """Wraps `optimizer` so that step() applies the gradients reduced (averaged by default)
    over all ranks. The result is an instance of the optimizer's own class (schedulers work)
    with the same parameter groups and state. The arguments are Horovod's:

    named_parameters: model.named_parameters(), to name the all-reduces (recommended);
    without it parameters are named by position. compression: Compression.fp16 (or bf16) to
    send floating gradients at 16 bits. backward_passes_per_step: backward passes accumulated
    locally before the reduction. gradient_predivide_factor: divides before the sum and
    multiplies after (the same average; for float16 range). groups (or num_groups): reduce
    explicit groups of gradients together (an int, or lists of parameters).
    sparse_as_dense: reduce sparse gradients densely (else by allgather).
    op=Adasum: the ranks' local optimizer steps are combined by Adasum instead of the
    gradients (Horovod's delta optimizer; cerar/torch/adasum_optimizer.py).
    resync_every: with K > 0, every K-th step() ends by broadcasting rank 0's parameters, so
    CERAR's replica drift (docs/fidelity.md) never accumulates over more than K steps.
    drift_check_every, drift_tolerance: drift control (cerar.torch.DriftControl, on by
    default): every K steps on which CERAR ran, a cheap check of the replicas' spread, and
    when it exceeds the tolerance (relative L2) rank 0's parameters and optimizer state are
    sent to every rank. None: CERAR_DRIFT_CHECK_EVERY / CERAR_DRIFT_TOLERANCE (job-wide) or the
    defaults; drift_check_every=0 turns it off. Its counters: optimizer.drift_control.stats.
    process_set: reduce among this ProcessSet's ranks only (registered; Horovod's semantics: a
    rank outside it steps on its own gradients). Drift control and resync_every work on the
    global set only, and are off in another set.
    """
    from cerar._process_sets import _set_id
    if _set_id(process_set) == 0:
        process_set = None
    else:
        drift_check_every, resync_every = 0, 0
    if op == Adasum and process_set is not None:
        raise ValueError("DistributedOptimizer: op=Adasum runs on the global process set only")
    if op == Adasum and _size() > 1:
        return _adasum(optimizer, named_parameters, compression, gradient_predivide_factor)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    wrapped = cls(optimizer.param_groups, named_parameters, op, backward_passes_per_step,
                  gradient_predivide_factor, resync_every, compression,
                  groups if groups is not None else (num_groups or None), sparse_as_dense,
                  drift_check_every, drift_tolerance, process_set)
    if optimizer.state:
        wrapped.load_state_dict(optimizer.state_dict())
    return wrapped


def _size():
    import cerar.torch as ct
    return ct.size()


def _adasum(optimizer, named_parameters, compression, gradient_predivide_factor):
    from cerar.torch.adasum_optimizer import adasum_optimizer
    if gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor needs op=Average or op=Sum")
    all_params = [p for group in optimizer.param_groups for p in group["params"]]
    by_id = _names_by_id(named_parameters, all_params)
    names = {p: f"adasum.{by_id[id(p)]}" for p in all_params}
    return adasum_optimizer(optimizer, names, compression or Compression.none)
