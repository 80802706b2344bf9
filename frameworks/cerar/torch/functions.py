"""Broadcasting a model's parameters, an optimizer's state and arbitrary objects."""
import io
import pickle

import torch

from cerar._frontend import auto_name
from cerar._handle import synchronize


def _bytes_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)  # torch >= 1.10


def broadcast_parameters(params, root_rank=0, prefix="broadcast_parameters",
                         process_set=None):
    """Overwrites every rank's parameters with root_rank's, in place.

    `params`: a state_dict, model.named_parameters(), or a list of (name, tensor) pairs;
    every rank must pass the same names. `process_set`: among its ranks only (root_rank is a
    global rank in it).
    """
    import cerar.torch as ct
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if items and not isinstance(items[0], tuple):
            raise ValueError("broadcast_parameters needs a dict or (name, tensor) pairs")
    handles = []
    for name, tensor in items:
        if not torch.is_tensor(tensor):
            continue
        handles.append(ct.broadcast_async_(tensor, root_rank, name=f"{prefix}.{name}",
                                           process_set=process_set))
    for handle in handles:
        synchronize(handle)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` on every rank of the set (pickled: its size, then its
    bytes); root_rank is a global rank."""
    import cerar.torch as ct
    name = auto_name("broadcast_object", name)
    if ct.rank() == root_rank:
        buffer = io.BytesIO()
        pickle.dump(obj, buffer, protocol=pickle.HIGHEST_PROTOCOL)
        payload = _bytes_tensor(buffer.getvalue())
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    ct.broadcast_(length, root_rank, name=f"{name}.size", process_set=process_set)
    if ct.rank() != root_rank:
        payload = torch.zeros(int(length.item()), dtype=torch.uint8)
    ct.broadcast_(payload, root_rank, name=f"{name}.data", process_set=process_set)
    if ct.rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Returns the list of every rank's (of the set's) `obj`, in rank order."""
    import cerar.torch as ct
    name = auto_name("allgather_object", name)
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    payload = _bytes_tensor(data)
    sizes = ct.allgather(torch.tensor([len(data)], dtype=torch.int64), name=f"{name}.size",
                         process_set=process_set)
    gathered = ct.allgather(payload, name=f"{name}.data",
                            process_set=process_set).numpy().tobytes()
    out, at = [], 0
    for size in sizes.tolist():
        out.append(pickle.loads(gathered[at:at + size]))
        at += size
    return out


def broadcast_optimizer_state(optimizer, root_rank=0, name="broadcast_optimizer_state",
                              process_set=None):
    """Makes every rank's (of the set's) optimizer state (hyperparameters and per-parameter
    buffers) equal to root_rank's. The optimizers must be built the same way on every rank."""
    import cerar.torch as ct
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        # As Horovod: before the first step, every trainable parameter gets a zero gradient
        # (code that reads or broadcasts the gradients next finds tensors, not None).
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
    state = broadcast_object(optimizer.state_dict(), root_rank, name=name,
                             process_set=process_set)
    if ct.rank() != root_rank:
        optimizer.load_state_dict(state)
