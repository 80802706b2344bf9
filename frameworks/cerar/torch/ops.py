"""Collectives on torch tensors, Horovod's semantics (imported by cerar.torch).

The runtime reduces float32/float64/float16/bfloat16, int32/int64 and uint8 with sum, min and
max (CERAR only for floating sums and averages). What Horovod accepts beyond that is done
here around the runtime's call, exactly:
- int8 and int16 travel as int32 and are cast back (a wrapping sum, as Horovod's);
- integer average and pre/postscale scale in float64 and truncate toward zero (Horovod's CPU
  path: average is the sum scaled by 1/size after the reduction);
- Product multiplies the allgathered tensors.
"""
import torch

from cerar import Average, Max, Min, Op, Product, Sum, _rt
from cerar._cerar import InvalidArgumentError, wire_carries
from cerar._frontend import (alltoall_splits, auto_name, begin, check_first_dimension,
                             check_not_in_flight)
from cerar._handle import Handle, synchronize
from cerar._process_sets import _membership, global_process_set
from cerar.torch._tensors import DTYPES, WIDENED, fresh, from_numpy, view, wire_source


def _data(tensor):
    return tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor


def resolve_op(op, average):
    """The reduction asked for: `op`, or Horovod's older `average` flag; Average by default."""
    if average is not None:  # Horovod's older flag
        return Average if average else Sum
    return Average if op is None else op


class _Combined:
    """Several runtime operations as one handle (poll and wait over all)."""

    def __init__(self, handles):
        self.handles = handles

    def poll(self):
        return all(h.poll() for h in self.handles)

    def wait(self):
        for h in self.handles:
            h.wait()


def _scale(tensor, factor):
    """tensor *= factor in float64, truncated toward zero (integer dtypes)."""
    tensor.copy_((tensor.to(torch.float64) * factor).to(tensor.dtype))


# --- allreduce ----------------------------------------------------------------------------------
def _plan(tensors, op, prescale, postscale, process_set=None):
    """What to send: (runtime op, wire tensors, after(): the work once the runtime is done,
    the runtime's pre- and postscale factors)."""
    integer = not tensors[0].dtype.is_floating_point
    if any(t.dtype.is_floating_point == integer for t in tensors):
        raise TypeError("cerar.torch: a grouped call needs all-floating or all-integer tensors")
    post_integer = 1.0
    if integer:
        for t in tensors if prescale != 1.0 else ():
            _scale(t, prescale)
        post_integer = postscale / _membership(process_set)[2] if op == Average else postscale
        op = Sum if op == Average else op
        prescale = postscale = 1.0
    wires = [t.to(WIDENED[t.dtype]) if t.dtype in WIDENED else t for t in tensors]

    def after():
        for t, w in zip(tensors, wires):
            if w is not t:
                t.copy_(w)  # int32 -> int8/int16 wraps, as the narrow sum would
            if post_integer != 1.0:
                _scale(t, post_integer)
    return op, wires, after, prescale, postscale


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, wire=None):
    """Reduces `tensor` in place across ranks; the Handle's result is `tensor`. `wire`:
    "fp16", "bf16" or "int8" sends a float32 CPU tensor in that format, adding in float32 at
    every hop (int8 also float16/bfloat16 tensors; docs/wires.md); every rank must ask the same."""
    if (average is None and (wire is None or wire == "none") and type(tensor) in _PLAIN
            and tensor.dtype in _LEAN_DTYPES and (process_set is None
                                                  or process_set is global_process_set)):
        lean_op = Average if op is None else op
        if lean_op in _LEAN_OPS:
            return _lean_allreduce_(tensor, name, lean_op, prescale_factor, postscale_factor)
    return _grouped_async_([tensor], average, name, op, prescale_factor, postscale_factor,
                           single=True, wire=wire, process_set=process_set)


# The common call (one floating tensor, the global set, the full-width wire, a runtime op)
# needs none of _grouped_async_'s planning: Python's work per tensor is most of a small
# tensor's cost, so that call takes the shortest way to the runtime with the same checks.
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_LEAN_DTYPES = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))
_LEAN_OPS = (Sum, Average, Min, Max, Op.Adasum)


def _lean_allreduce_(tensor, name, op, prescale, postscale):
    name = auto_name("allreduce") if name is None else str(name)
    data = tensor.data if type(tensor) is torch.nn.Parameter else tensor
    if not data.is_cuda and not data.is_sparse and data.is_contiguous():
        handle = _rt().allreduce_host(name, data, data.data_ptr(), DTYPES[data.dtype],
                                      list(data.shape), op, float(prescale), float(postscale))
    else:  # view() checks and refuses as for every call
        handle = _rt().allreduce(name, view(data), None, op, float(prescale),
                                 float(postscale), "none", 0)
    return Handle(handle, None, tensor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, wire=None):
    """Reduces a copy of `tensor`; the Handle's result is the new tensor."""
    return allreduce_async_(fresh(tensor), average, name, op, prescale_factor, postscale_factor,
                            process_set=process_set, wire=wire)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None, wire=None):
    """Reduces a list of tensors in place as one fused unit (names "<name>.<i>")."""
    return _grouped_async_(list(tensors), average, name, op, prescale_factor, postscale_factor,
                           wire=wire, process_set=process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, wire=None):
    return grouped_allreduce_async_([fresh(t) for t in tensors], average, name, op,
                                    prescale_factor, postscale_factor, process_set=process_set,
                                    wire=wire)


def _check_wire(wire, tensors, op):
    """The runtime's name of `wire` ("none" for None); a lossy wire carries float32 CPU sums
    only (Sum or Average), the int8 wire also float16 and bfloat16 ones."""
    if wire is None or wire == "none":
        return "none"
    if wire not in ("fp16", "bf16", "int8"):
        raise ValueError(f"cerar.torch: wire must be None, 'fp16', 'bf16' or 'int8', got "
                         f"{wire!r}")
    if not isinstance(op, Op) or any(t.dtype not in DTYPES or t.device.type != "cpu"
                                     or not wire_carries(wire, DTYPES[t.dtype], op)
                                     for t in tensors):
        raise TypeError(f"cerar.torch: a {wire} wire sums float32 CPU tensors only (int8: also "
                        "float16 and bfloat16; Compression.fp16/bf16 cast others in Python)")
    return wire


def _grouped_async_(tensors, average, name, op, prescale, postscale, single=False, wire=None,
                    process_set=None):
    op = resolve_op(op, average)
    wire = _check_wire(wire, tensors, op)
    name, set_id = begin("allreduce" if single else "grouped_allreduce", name, process_set)
    result = (lambda: tensors[0]) if single else (lambda: tensors)
    if not tensors:
        return Handle(_Combined([]), lambda _: result())
    datas = [_data(t) for t in tensors]
    # The runtime's names (Product's are its allgathers'), refused before any tensor changes.
    names = ([f"{name}.product.{i}" for i in range(len(datas))] if op is Product
             else [name] if single else [f"{name}.{i}" for i in range(len(datas))])
    check_not_in_flight(names, set_id)
    if op is Product:
        return _product_async(datas, names, prescale, postscale, result, process_set)
    runtime_op, wires, after, pre, post = _plan(datas, op, float(prescale), float(postscale),
                                                process_set)
    views = [view(w) for w in wires]
    if single:
        handle = _rt().allreduce(name, views[0], None, runtime_op, pre, post, wire, set_id)
    else:
        handle = _rt().grouped_allreduce(names, views, None, runtime_op, pre, post, wire, set_id)

    def finish(_):
        after()
        return result()
    return Handle(handle, finish)


def _product_async(tensors, names, prescale, postscale, result, process_set=None):
    """Product from every rank's tensor (allgathered under `names`), multiplied in rank
    order."""
    if prescale != 1.0:
        for t in tensors:
            t.copy_(t * prescale)
    gathers = [allgather_async(t.reshape(1, -1), name=n, process_set=process_set)
               for t, n in zip(tensors, names)]

    def finish(_):
        for t, g in zip(tensors, gathers):
            gathered = g.wait()
            if gathered.dtype in (torch.float16, torch.bfloat16):  # no CPU prod for these
                gathered = gathered.float()
            out = gathered.prod(dim=0).reshape(t.shape).to(t.dtype)
            t.copy_(out * postscale if postscale != 1.0 else out)
        return result()
    return Handle(_Combined(gathers), finish)


# --- allgather, broadcast -----------------------------------------------------------------------
def allgather_async(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along dimension 0 (its size may differ per rank)."""
    name, set_id = begin("allgather", name, process_set)
    source, dtype, device = wire_source(tensor), tensor.dtype, tensor.device
    handle = _rt().allgather(name, view(source), set_id)

    def finish(h):
        return from_numpy(h.output(), source.dtype).to(device=device, dtype=dtype)
    return Handle(handle, finish)


def grouped_allgather_async(tensors, name=None, process_set=None):
    """allgather of each tensor (names "<name>.<i>"); the tensors of one dtype travel as one
    unit (all or none, one buffer). The Handle's result is the list of gathered tensors."""
    tensors = list(tensors)
    base, set_id = begin("grouped_allgather", name, process_set)
    check_not_in_flight([f"{base}.{i}" for i in range(len(tensors))], set_id)  # several units
    sources = [wire_source(t) for t in tensors]
    by_dtype = {}
    for i, source in enumerate(sources):
        by_dtype.setdefault(source.dtype, []).append(i)
    units = [(members, _rt().grouped_allgather([f"{base}.{i}" for i in members],
                                               [view(sources[i]) for i in members], set_id))
             for members in by_dtype.values()]

    def finish(_):
        outs = [None] * len(tensors)
        for members, handle in units:
            flat = from_numpy(handle.output(), sources[members[0]].dtype)
            rows = handle.received_splits()  # [rank * tensors + tensor]
            at = 0
            for k, i in enumerate(members):
                shape = [sum(rows[k::len(members)]), *sources[i].shape[1:]]
                count = int(torch.Size(shape).numel())
                outs[i] = flat[at:at + count].reshape(shape).to(device=tensors[i].device,
                                                                 dtype=tensors[i].dtype)
                at += count
        return outs
    return Handle(_Combined([h for _, h in units]), finish)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Overwrites `tensor` with root_rank's (a global rank, also in a process set), in place."""
    name, set_id = begin("broadcast", name, process_set)
    data = _data(tensor)
    if data.dtype in WIDENED:
        wire = data.to(WIDENED[data.dtype])
        handle = _rt().broadcast(name, view(wire), int(root_rank), set_id)
        return Handle(handle, lambda _: (data.copy_(wire), tensor)[1])
    handle = _rt().broadcast(name, view(data), int(root_rank), set_id)
    return Handle(handle, lambda _: tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(fresh(tensor), root_rank, name, process_set)


def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Reduces a sparse COO tensor by allgathering its indices and values (a sum of the
    entries; Average divides by the size). Returns a callable that waits and gives the
    sparse result, as Horovod's."""
    if op not in (Average, Sum):
        raise ValueError("cerar.torch.sparse_allreduce_async: op must be Average or Sum")
    tensor = tensor.coalesce()
    base = auto_name("sparse_allreduce", name)
    indices = allgather_async(tensor.indices().t().contiguous(), name=f"{base}.indices",
                              process_set=process_set)
    values = allgather_async(tensor.values(), name=f"{base}.values", process_set=process_set)
    set_size = _membership(process_set)[2]

    def result():
        gathered = synchronize(values)
        if op == Average:
            gathered = gathered / set_size
        return torch.sparse_coo_tensor(synchronize(indices).t(), gathered, tensor.size())
    return result


# --- reducescatter, alltoall --------------------------------------------------------------------
_SCATTER_OPS = (Sum, Average, Min, Max)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Reduces `tensor` across ranks and gives this rank its share of the first dimension (the
    first rows % size ranks get one row more, as Horovod splits it); the Handle's result is the
    new tensor. The input is not modified."""
    return _reducescatter_async([tensor], name, op, prescale_factor, postscale_factor, True,
                                process_set)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors as one fused unit (names "<name>.<i>"); the Handle's
    result is the list of this rank's shares."""
    return _reducescatter_async(list(tensors), name, op, prescale_factor, postscale_factor,
                                False, process_set)


def _reducescatter_async(tensors, name, op, prescale, postscale, single, process_set=None):
    from cerar._cerar import scatter_rows
    op = Average if op is None else op
    if op not in _SCATTER_OPS:
        # NotImplementedError is a RuntimeError, which is what Horovod raises here.
        raise NotImplementedError(f"cerar.torch.reducescatter supports Sum, Average, Min and "
                                  f"Max, not {op}")
    name, set_id = begin("reducescatter" if single else "grouped_reducescatter", name,
                         process_set)
    if not tensors:
        return Handle(_Combined([]), lambda _: [])
    for t in tensors:
        check_first_dimension(t.dim(), "cerar.torch.reducescatter")
    integer = not tensors[0].dtype.is_floating_point
    if any(t.dtype.is_floating_point == integer for t in tensors):
        raise TypeError("cerar.torch: a grouped call needs all-floating or all-integer tensors")
    prescale, postscale = float(prescale), float(postscale)
    post_integer = 1.0
    _, rank, size = _membership(set_id)
    if integer:  # scaled here in float64 and truncated, as Horovod's CPU path
        post_integer = postscale / size if op == Average else postscale
        op = Sum if op == Average else op
    wires, outputs = [], []
    for t in tensors:
        t = t.detach()
        wire = t.to(WIDENED[t.dtype]) if t.dtype in WIDENED else t
        if integer and prescale != 1.0:
            wire = fresh(wire)
            _scale(wire, prescale)
        if not wire.is_contiguous():
            wire = fresh(wire)
        wires.append(wire)
        shape = [scatter_rows(wire.shape[0], rank, size), *wire.shape[1:]]
        outputs.append(torch.empty(shape, dtype=wire.dtype, device=wire.device))
    dtypes = [t.dtype for t in tensors]
    pre, post = (1.0, 1.0) if integer else (prescale, postscale)
    names = [name] if single else [f"{name}.{i}" for i in range(len(wires))]
    handle = _rt().reducescatter(names, [view(w) for w in wires], [view(o) for o in outputs],
                                 op, pre, post, set_id)

    def finish(_):
        results = []
        for out, dtype in zip(outputs, dtypes):
            out = out.to(dtype) if out.dtype != dtype else out  # int32 -> int8/int16 wraps
            if post_integer != 1.0:
                _scale(out, post_integer)
            results.append(out)
        return results[0] if single else results
    return Handle(handle, finish)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Sends splits[j] rows (first dimension, in order) of `tensor` to rank j; without splits
    the first dimension is divided equally. The Handle's result is (the rows received from
    every rank, concatenated in rank order, and the received splits as an int32 tensor)."""
    name, set_id = begin("alltoall", name, process_set)
    size = _membership(set_id)[2]
    if torch.is_tensor(splits):
        if splits.dtype != torch.int32:
            raise InvalidArgumentError("cerar.torch.alltoall: splits must hold 32-bit integers "
                                       f"(as Horovod's), got {splits.dtype}")
        if splits.dim() > 1:
            raise InvalidArgumentError("cerar.torch.alltoall: splits must be one-dimensional")
    check_first_dimension(tensor.dim(), "cerar.torch.alltoall")
    wanted = alltoall_splits(splits.cpu().tolist() if torch.is_tensor(splits) else splits,
                             tensor.shape[0], size, "cerar.torch.alltoall")
    source, dtype, device = wire_source(tensor), tensor.dtype, tensor.device
    splits_device = splits.device if torch.is_tensor(splits) else torch.device("cpu")
    handle = _rt().alltoall(name, view(source), wanted, set_id)

    def finish(h):
        out = from_numpy(h.output(), source.dtype).to(device=device, dtype=dtype)
        received = torch.tensor(h.received_splits(), dtype=torch.int32, device=splits_device)
        return out, received
    return Handle(handle, finish)
