"""Replica drift: CERAR's ranks do not end bit-identical (cerar-protocol.md, "What each worker
ends with"), so after many steps their parameters differ slightly. These helpers measure the
spread and put the replicas back in step.

    drift = cerar.torch.parameter_drift(model)           # cheap: two small all-reduces
    drift = cerar.torch.parameter_drift(model, exact=True)  # one broadcast of the model
    cerar.torch.resync_parameters(model)                  # every rank takes rank 0's values

DistributedOptimizer(..., resync_every=K) calls resync_parameters after every K-th step().
The collectives use the exact ring for min/max and broadcast, whatever CERAR_ALGORITHM says.
"""
import torch


def _tensors(model):
    """(name, tensor) pairs of a module, a state_dict or a list of pairs, in name order."""
    if isinstance(model, torch.nn.Module):
        items = model.named_parameters()
    elif isinstance(model, dict):
        items = model.items()
    else:
        items = model
    return sorted((n, t.detach()) for n, t in items if torch.is_tensor(t))


def parameter_drift(model, exact=False, name="parameter_drift"):
    """How far the ranks' parameters are apart; the same dict on every rank.

    Cheap mode: per tensor a float64 checksum (sum) and norm, all-reduced with Min and Max
    (2 * tensors * 8 bytes each way); reports the largest spread of the checksums
    ("sum_spread", absolute) and of the norms relative to the norm ("norm_spread_rel"). A zero
    spread does not prove bit identity, but any real drift shows in the norms.
    exact=True also broadcasts rank 0's parameters (the model's size once) and reports
    max |p_rank - p_rank0| over all elements and ranks ("max_abs") and that relative to
    max |p| ("max_rel").
    """
    import cerar.torch as ct
    items = _tensors(model)
    local = torch.tensor([v for _, t in items
                          for v in (t.double().sum().item(), t.double().norm().item())],
                         dtype=torch.float64)
    low = ct.allreduce(local, op=ct.Min, name=f"{name}.min")
    high = ct.allreduce(local, op=ct.Max, name=f"{name}.max")
    spread = (high - low).view(-1, 2)
    norms = high.view(-1, 2)[:, 1].clamp_min(1e-30)
    result = {"sum_spread": spread[:, 0].max().item() if len(items) else 0.0,
              "norm_spread_rel": (spread[:, 1] / norms).max().item() if len(items) else 0.0}
    if exact:
        flat = torch.cat([t.reshape(-1).float() for _, t in items]) if items else torch.zeros(0)
        root = ct.broadcast(flat, root_rank=0, name=f"{name}.root")
        difference = torch.tensor([(flat - root).abs().max().item() if flat.numel() else 0.0],
                                  dtype=torch.float64)
        worst = ct.allreduce(difference, op=ct.Max, name=f"{name}.max_abs").item()
        scale = root.abs().max().item() if root.numel() else 0.0
        result.update(max_abs=worst, max_rel=worst / scale if scale > 0 else worst)
    return result


def resync_parameters(model, root_rank=0, prefix="resync_parameters"):
    """Overwrites every rank's parameters (and buffers, for a module) with root_rank's."""
    import cerar.torch as ct
    params = model.state_dict() if isinstance(model, torch.nn.Module) else model
    ct.broadcast_parameters(params, root_rank=root_rank, prefix=prefix)
