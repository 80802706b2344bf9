"""torch.distributed backend "cerar": existing torch.distributed code (DDP included) runs its
collectives through cerar's runtime by changing the backend name.

    import cerar.torch                           # registers "cerar" (torch 2.x also finds it
    dist.init_process_group("cerar")             # through its entry point, without the import)
    dist.init_process_group("cpu:cerar,cuda:nccl")   # torch 2.x: per device

Each process group starts its own runtime from torch's store, rank, size and timeout: rank 0
hosts cerar's rendezvous store (the C++ server, a fresh secret unless CERAR_SECRET is set)
and publishes its address through torch's store. all_reduce uses the exact ring unless the
job's settings ask for CERAR (CERAR_ALGORITHM=auto or cerar, rank 0's value); broadcast,
all_gather (and torch 2.x's coalesced all_gather_into_tensor, FSDP2's) and barrier are cerar's
exact collectives; reduce_scatter (list, flat and coalesced forms) is the runtime's exact
reducescatter (each rank's share one row of a [size, k] buffer) and all_to_all (list form, and
all_to_all_single with split sizes) its alltoall (cerar.torch._dist_exchange). What cerar
cannot express goes to a Gloo process group on the same ranks, made at its first use: reduce,
gather, scatter, point-to-point, a reduce_scatter whose pieces differ in size, other dtypes
(int8, int16, bool, complex) and reductions (PRODUCT, bitwise, AVG of integers), sparse
tensors, lists of several tensors per rank.
"""
import atexit
import itertools
import threading
import weakref

import torch
import torch.distributed as dist

from cerar import Op, cuda_built
from cerar.torch import _dist_exchange as _exchange
from cerar.torch._dist_runtime import round_prefix, start_runtime
from cerar.torch._dist_work import _Completer
from cerar.torch._tensors import DTYPES, from_numpy, view

NAME = "cerar"
_c10d = torch._C._distributed_c10d
# torch 2.x: a Backend serves the devices it is registered for inside torch's ProcessGroup
# (so "cpu:cerar,cuda:nccl" works); torch 1.13 has no Backend class: the whole ProcessGroup.
_BASE = getattr(_c10d, "Backend", None) or dist.ProcessGroup


def missing_api():
    """Why this torch cannot host the backend, or None."""
    if not dist.is_available():
        return "this torch has no torch.distributed"
    if not hasattr(_c10d, "_create_work_from_future"):  # came with the Python trampolines
        return ("this torch cannot run a process group written in Python (no "
                "torch._C._distributed_c10d.ProcessGroup / Work trampolines, torch 1.13 has them)")
    return None


# --- the backend --------------------------------------------------------------------------------
def _op_of(reduce_op, dtype):
    """The runtime's Op for a torch ReduceOp on `dtype`, or None (Gloo then)."""
    ops = [(dist.ReduceOp.SUM, Op.Sum), (dist.ReduceOp.MIN, Op.Min), (dist.ReduceOp.MAX, Op.Max)]
    if dtype.is_floating_point and hasattr(dist.ReduceOp, "AVG"):
        ops.append((dist.ReduceOp.AVG, Op.Average))
    for theirs, ours in ops:
        if reduce_op == theirs:
            return ours
    return None


def _runtime_can(tensors):
    """Whether the runtime takes these tensors (one dtype it reduces, dense, on one device:
    the host, or a GPU in a CUDA build); Gloo takes the others."""
    return (len(tensors) > 0 and all(t.dtype in DTYPES and t.layout == torch.strided
                                     and (t.device.type == "cpu" or (t.is_cuda and cuda_built()))
                                     for t in tensors)
            and len({(t.dtype, t.device) for t in tensors}) == 1)


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


class ProcessGroupCerar(_BASE):
    """cerar's runtime behind torch.distributed's collectives (see the module's docstring)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        self._runtime, self._server = start_runtime(store, rank, size, seconds)
        self._names = itertools.count()
        self._completer = _Completer()
        self._gloo_group = None
        self._lock = threading.Lock()
        _live.add(self)

    def getBackendName(self):  # noqa: N802 -- torch's name
        return NAME

    def _name(self, kind):
        return f"{kind}.{next(self._names)}"

    def _gloo(self):
        """The Gloo group on the same ranks for what cerar has no collective for; made at its
        first use (every rank reaches it at the same collective)."""
        with self._lock:
            if self._gloo_group is None:
                store = dist.PrefixStore(round_prefix() + "gloo/", self._store)
                self._gloo_group = dist.ProcessGroupGloo(store, self.rank(), self.size(),
                                                         self._timeout)
            return self._gloo_group

    def _gloo_call(self, name, *args, aliases=None):
        """The Gloo group's `name` (or an alias of it) on `args`."""
        gloo = self._gloo()
        for candidate in (name, *(_ALIASES.get(name, ()) if aliases is None else aliases)):
            if hasattr(gloo, candidate):
                return getattr(gloo, candidate)(*args)
        raise RuntimeError(f"cerar: {name} is not supported by this torch's Gloo either")

    def _submit(self, handle, finish, tensors):
        def done():
            handle.wait()
            return finish(handle)
        return self._completer.work(done, tensors)

    # --- cerar's collectives
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else _c10d.AllreduceOptions()
        op = _op_of(opts.reduceOp, tensors[0].dtype) if len(tensors) == 1 else None
        if op is None or not _runtime_can(tensors):
            return self._gloo().allreduce(tensors, opts)
        tensor = tensors[0]
        wire = _contiguous(tensor)
        handle = self._runtime.allreduce(self._name("allreduce"), view(wire), None, op)
        return self._submit(handle, lambda _: (wire is tensor or tensor.copy_(wire), tensors)[1],
                            tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else _c10d.AllreduceCoalescedOptions()
        op = _op_of(opts.reduceOp, tensors[0].dtype) if tensors else None
        if op is None or not _runtime_can(tensors):
            return self._gloo().allreduce_coalesced(tensors, opts)
        wires = [_contiguous(t) for t in tensors]
        base = self._name("allreduce_coalesced")
        handle = self._runtime.grouped_allreduce([f"{base}.{i}" for i in range(len(wires))],
                                                 [view(w) for w in wires], None, op)

        def finish(_):
            for t, w in zip(tensors, wires):
                if w is not t:
                    t.copy_(w)
            return tensors
        return self._submit(handle, finish, tensors)

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else _c10d.BroadcastOptions()
        if len(tensors) != 1 or not _runtime_can(tensors):
            return self._gloo().broadcast(tensors, opts)
        tensor = tensors[0]
        wire = _contiguous(tensor)
        handle = self._runtime.broadcast(self._name("broadcast"), view(wire),
                                         int(opts.rootRank))
        return self._submit(handle, lambda _: (wire is tensor or tensor.copy_(wire), tensors)[1],
                            tensors)

    def _gather_into(self, outputs, tensor):
        """allgather of `tensor` (flattened) into the list `outputs`, in rank order."""
        source = tensor.detach().reshape(-1).contiguous()  # outputs are written only after
        handle = self._runtime.allgather(self._name("allgather"), view(source))

        def finish(h):
            flat = from_numpy(h.output(), source.dtype)
            if flat.numel() != sum(o.numel() for o in outputs):
                raise ValueError(f"cerar: all_gather of {flat.numel()} elements into outputs of "
                                 f"{sum(o.numel() for o in outputs)}: sizes differ across ranks")
            offset = 0
            for out in outputs:
                out.copy_(flat[offset:offset + out.numel()].view(out.shape))
                offset += out.numel()
            return outputs
        return handle, finish

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        if (len(input_tensors) != 1 or not _runtime_can(input_tensors + output_tensors[0])
                or len(output_tensors[0]) != self.size()):
            return self._gloo().allgather(output_tensors, input_tensors, opts)
        handle, finish = self._gather_into(output_tensors[0], input_tensors[0])
        return self._submit(handle, lambda h: (finish(h), output_tensors)[1],
                            output_tensors[0])

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 -- torch's names
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        if not _runtime_can([output, input]):
            return self._gloo()._allgather_base(output, input, opts)
        handle, finish = self._gather_into([output], input)
        return self._submit(handle, lambda h: (finish(h), [output])[1], [output])

    all_gather_single = _allgather_base  # the name newer torch calls it by

    # --- reduce_scatter, all_to_all: the runtime's exact reducescatter and alltoall
    def _exchanged(self, kind, submit, tensors, result, fallback):
        """`submit(runtime, name)` -> (handle, finish) or None (then `fallback()`, Gloo's)."""
        if not _runtime_can(tensors):
            return fallback()
        submitted = submit(self._runtime, self._name(kind))
        if submitted is None:
            return fallback()
        handle, finish = submitted
        return self._submit(handle, lambda h: (finish(h), result)[1], result)

    def reduce_scatter(self, output_tensors, input_tensor_lists, opts=None):
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        op = _op_of(opts.reduceOp, output_tensors[0].dtype) if output_tensors else None
        if op is None or len(output_tensors) != 1 or len(input_tensor_lists) != 1:
            return self._gloo_call("reduce_scatter", output_tensors, input_tensor_lists, opts)
        output, inputs = output_tensors[0], input_tensor_lists[0]
        return self._exchanged(
            "reduce_scatter",
            lambda rt, name: _exchange.reduce_scatter(rt, name, output, inputs, op, view),
            [output, *inputs], output_tensors,
            lambda: self._gloo_call("reduce_scatter", output_tensors, input_tensor_lists, opts))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 -- torch's names
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        op = _op_of(opts.reduceOp, output.dtype)

        def fallback():
            return self._gloo_call("_reduce_scatter_base", output, input, opts)
        if op is None:
            return fallback()
        return self._exchanged(
            "reduce_scatter",
            lambda rt, name: _exchange.reduce_scatter_flat(rt, name, output, input, op, view),
            [output, input], [output], fallback)

    reduce_scatter_single = _reduce_scatter_base  # the name newer torch calls it by

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else _c10d.ReduceScatterOptions()
        op = _op_of(opts.reduceOp, outputs[0].dtype) if outputs else None

        def fallback():
            return self._gloo_call("reduce_scatter_tensor_coalesced", outputs, inputs, opts,
                                   aliases=("reduce_scatter_single_coalesced",))
        if op is None:
            return fallback()
        return self._exchanged(
            "reduce_scatter",
            lambda rt, name: _exchange.reduce_scatter_coalesced(rt, name, outputs, inputs, op,
                                                                view),
            [*outputs, *inputs], outputs, fallback)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced  # its newer name

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else _c10d.AllgatherOptions()
        return self._exchanged(
            "allgather",
            lambda rt, name: _exchange.all_gather_coalesced(rt, name, outputs, inputs, view),
            [*outputs, *inputs], outputs,
            lambda: self._gloo_call("allgather_into_tensor_coalesced", outputs, inputs, opts,
                                    aliases=("all_gather_single_coalesced",)))

    all_gather_single_coalesced = allgather_into_tensor_coalesced  # its newer name

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        return self._exchanged(
            "all_to_all",
            lambda rt, name: _exchange.all_to_all(rt, name, output_tensors, input_tensors,
                                                  view),
            [*output_tensors, *input_tensors], output_tensors,
            lambda: self._gloo_call("alltoall", output_tensors, input_tensors, opts))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        opts = opts if opts is not None else _c10d.AllToAllOptions()
        return self._exchanged(
            "all_to_all",
            lambda rt, name: _exchange.all_to_all_single(rt, name, output, input,
                                                         output_split_sizes,
                                                         input_split_sizes, view),
            [output, input], [output],
            lambda: self._gloo_call("alltoall_base", output, input, output_split_sizes,
                                    input_split_sizes, opts))

    all_to_all_single = alltoall_base  # the name newer torch calls it by

    def barrier(self, opts=None):
        handle = self._runtime.barrier()
        return self._submit(handle, lambda _: [], [])

    # --- shutdown
    def shutdown(self):
        """Stops this group's runtime and its Gloo group; pending operations fail."""
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.shutdown()
            self._completer.close()
        gloo, self._gloo_group = self._gloo_group, None
        if gloo is not None and hasattr(gloo, "shutdown"):
            gloo.shutdown()
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def abort(self):
        self.shutdown()


# torch renamed some collectives across versions: Gloo's of either name serves
_ALIASES = {"_reduce_scatter_base": ("reduce_scatter_single",),
            "alltoall_base": ("all_to_all_single",)}


def _to_gloo(name, *names):
    """A collective cerar has no runtime operation for: the Gloo group's, first of `names` it
    has (torch renamed some across versions)."""
    def method(self, *args):
        return self._gloo_call(name, *args, aliases=names)
    method.__name__ = name
    return method


for _name, *_aliases in (
        ("reduce",), ("gather",), ("scatter",),
        ("send",), ("recv",), ("recv_anysource",), ("allgather_coalesced",),
        ("allreduce_sparse",)):
    setattr(ProcessGroupCerar, _name, _to_gloo(_name, *_aliases))

def group_backend(group=None):
    """The ProcessGroupCerar serving `group`'s CPU tensors (default: the default group)."""
    group = group if group is not None else dist.group.WORLD
    found = group if isinstance(group, ProcessGroupCerar) else (
        group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else None)
    if not isinstance(found, ProcessGroupCerar):
        raise ValueError("cerar: this process group does not run on the cerar backend")
    return found


def stats(group=None):
    """The counters of `group`'s runtime (as cerar.stats(): ring_buffers, cerar_buffers, ...)."""
    runtime = group_backend(group)._runtime
    if runtime is None:
        raise ValueError("cerar: this process group has been shut down")
    return runtime.stats()


# Runtimes still running at exit are stopped (a group torch never destroyed).
_live = weakref.WeakSet()


@atexit.register
def _shutdown_all():
    for group in list(_live):
        group.shutdown()


# --- registration -------------------------------------------------------------------------------
def _create(store, rank, size, timeout):
    return ProcessGroupCerar(store, rank, size, timeout)


def register_backend():
    """Registers "cerar" with torch.distributed (idempotent). Raises RuntimeError naming the
    missing API on a torch that cannot host it."""
    why = missing_api()
    if why is not None:
        raise RuntimeError(f"cerar: the torch.distributed backend cannot be registered: {why}")
    if NAME.upper() in dist.Backend._plugins:
        return
    try:
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    except TypeError:  # torch before 2.2 has no `devices`
        dist.Backend.register_backend(NAME, _create)
