"""Replica drift: CERAR's ranks do not end bit-identical (cerar-protocol.md, "What each worker
ends with"), so after many steps their parameters differ slightly. These helpers measure the
spread and put the replicas back in step.

    drift = cerar.torch.parameter_drift(model)           # cheap: two small all-reduces
    drift = cerar.torch.parameter_drift(model, exact=True)  # one broadcast of the model
    cerar.torch.resync_parameters(model)                  # every rank takes rank 0's values

DistributedOptimizer(..., resync_every=K) calls resync_parameters after every K-th step().
DriftControl (below), on by default in DistributedOptimizer and the DDP hook, checks the
spread every few steps on which CERAR ran and resyncs parameters and optimizer state when it
exceeds a tolerance (docs/fidelity.md, "Drift control").
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
    max |p| ("max_rel"), and max over ranks of ||p_rank - p_rank0||_2 / ||p_rank0||_2
    ("l2_rel", the measure DriftControl estimates).
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
        delta = (flat - root).double()
        difference = torch.tensor([delta.abs().max().item() if flat.numel() else 0.0,
                                   delta.norm().item()], dtype=torch.float64)
        worst, l2 = ct.allreduce(difference, op=ct.Max, name=f"{name}.max_abs").tolist()
        scale = root.abs().max().item() if root.numel() else 0.0
        norm = root.double().norm().item()
        result.update(max_abs=worst, max_rel=worst / scale if scale > 0 else worst,
                      l2_rel=l2 / norm if norm > 0 else l2)
    return result


def resync_parameters(model, root_rank=0, prefix="resync_parameters"):
    """Overwrites every rank's parameters (and buffers, for a module) with root_rank's."""
    import cerar.torch as ct
    params = model.state_dict() if isinstance(model, torch.nn.Module) else model
    ct.broadcast_parameters(params, root_rank=root_rank, prefix=prefix)


# --- drift control, on by default in DistributedOptimizer and the DDP hook ---------------------
import math  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402

# Measured on the fidelity suite's models (docs/fidelity.md, "Drift control"): a check costs
# about 1-4 ms and Adam's resync (parameters and moments) about 20 ms, so every 20 steps they
# stay far under 1% of a step (charlm: 270-500 ms, digits: 14-60 ms, no resync with SGD);
# Adam's drift then stays near what 20 steps make. 1e-3 of ||p|| is 10x above SGD's plateau
# (about 1e-4: no resync needed) and crossed by Adam within 10 steps.
DEFAULT_CHECK_EVERY = 20
DEFAULT_TOLERANCE = 1e-3
# Steps from the check's launch (the last rank's) to its resync. The check runs under the next
# step's compute. Every rank has its result by the end of the second step: each rank submits
# the check before that step's gradients, so the check is negotiated no later than they are,
# and the second step's gradients come in a later cycle, which the coordinator runs after it.
RESYNC_LAG = 2

_controls = weakref.WeakSet()
_serial = iter(range(1 << 62))


def _env_number(name, kind, default):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a valid {kind.__name__}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={text!r} must be a finite number >= 0")
    return value


def _signs(numel, seed, device):
    """Two fixed random +-1 vectors (int8), the same on every rank."""
    g = torch.Generator().manual_seed(0x5EED + seed)
    return (torch.randint(0, 2, (2, numel), generator=g, dtype=torch.int8) * 2 - 1).to(device)


class DriftControl:
    """Keeps CERAR's replicas together: every `every` steps on which CERAR ran, a cheap check;
    when the measured drift exceeds `tolerance`, rank 0's parameters and optimizer state
    (momentum, Adam's moments, ...) are sent to every rank.

    The check: per tensor two float64 fingerprints (projections on two fixed random +-1
    vectors) and the squared norm; one all-reduce (Max) of [fp, -fp, ...] gives every rank
    each fingerprint's spread over the ranks. A random +-1 projection of p_r - p_s has the
    mean square ||p_r - p_s||_2^2 whatever the drift's pattern, so the drift is estimated as
    sqrt(sum of squared spreads / 2) / ||p||_2: about the largest pairwise L2 distance
    relative to the model's norm. It goes through the runtime as
    an ordinary named all-reduce ("cerar.drift.<prefix>.check.<n>"; Max: always the exact ring)
    launched after a step and read RESYNC_LAG steps later, so it never blocks the step. The
    decision is computed from the reduced vector, identical on every rank.

    Nothing happens while only the exact ring ran: a step counts when the runtime's
    cerar_buffers counter moved. Ranks whose counters moved at different steps (an own CERAR
    all-reduce in flight across step()) launch check n at different steps; the check carries
    each rank's step, and every rank resyncs at (the latest launch) + RESYNC_LAG, so they
    still act at the same step.

    `every`/`tolerance`: None takes CERAR_DRIFT_CHECK_EVERY / CERAR_DRIFT_TOLERANCE, else the
    defaults. Those are job-wide: the first check carries rank 0's values and every rank adopts
    them (CERAR_DRIFT_CHECK_EVERY=0 on rank 0 then turns it off everywhere after that check).
    every=0 passed in code turns it off with no traffic at all (the same code runs on every
    rank, as with Horovod's arguments). The operations are named after `prefix`, by default
    "opt.<k>", k counting this process's drift controls in creation order: build optimizers
    in the same order on every rank (as DDP hook states).
    """

    def __init__(self, parameters, optimizer=None, every=None, tolerance=None, prefix=None):
        if every is not None and (int(every) != every or every < 0):
            raise ValueError("drift_check_every must be an int >= 0 (0: off)")
        if tolerance is not None and not (tolerance > 0 and math.isfinite(tolerance)):
            raise ValueError("drift_tolerance must be a finite number > 0")
        self._coded_off = every == 0
        # False skips after_step entirely (what every=0 does; benchmarks toggle it).
        self.active = not self._coded_off
        env_every = _env_number("CERAR_DRIFT_CHECK_EVERY", int, DEFAULT_CHECK_EVERY)
        env_tolerance = _env_number("CERAR_DRIFT_TOLERANCE", float, DEFAULT_TOLERANCE)
        if env_tolerance == 0:
            raise ValueError("CERAR_DRIFT_TOLERANCE must be > 0")
        self._from_env = every is None or tolerance is None
        self.every = int(every) if every is not None else env_every
        self.tolerance = float(tolerance) if tolerance is not None else env_tolerance
        # Until the first check ranks run on their own values; an env "off" still joins it.
        self._agreed = not self._from_env
        self._items = _tensors(parameters)
        self._optimizer = optimizer
        self.prefix = prefix if prefix is not None else f"opt.{next(_serial)}"
        self._signs = {}
        self._steps = 0
        import cerar
        self._seen = cerar.stats()["cerar_buffers"] if cerar.is_initialized() else 0
        self._dirty = False
        self._pending = None   # (handle, launch step, check number)
        self._due = None       # (step, resync?, check number)
        self._launched = 0
        self.stats = dict(steps=0, cerar_steps=0, checks=0, resyncs=0, last_drift=0.0,
                          max_drift=0.0, check_ms=0.0, resync_ms=0.0, resync_bytes=0)
        _controls.add(self)

    @property
    def enabled(self):
        return self.active and (self.every > 0 or not self._agreed)

    def after_step(self):
        """Called once per synchronized step, after the parameters were updated."""
        if not self.active:
            return
        import cerar
        self._steps += 1
        step = self._steps
        self.stats["steps"] = step
        count = cerar.stats()["cerar_buffers"]
        if count != self._seen:
            self._dirty = True
            self.stats["cerar_steps"] += 1
        self._seen = count
        if self._pending is not None and self._pending[0].poll():
            self._read(*self._pending)
            self._pending = None
        if self._due is not None and step >= self._due[0]:
            target, resync, number = self._due
            self._due = None
            if step > target:  # ordering of the runtime's responses rules this out
                raise RuntimeError(f"cerar drift control: check {number} was read at step "
                                   f"{step}, after its resync step {target}")
            if resync:
                self.resync(f"cerar.drift.{self.prefix}.resync.{number}")
        every = self.every if self.every > 0 else DEFAULT_CHECK_EVERY
        if (self._dirty and self.enabled and self._pending is None and self._due is None
                and step % every == 0):
            self._launch(step)

    def _fingerprints(self):
        sums = []
        for index, (_, t) in enumerate(self._items):
            flat = t.reshape(-1).double()
            signs = self._signs.get(index)
            if signs is None or signs.device != flat.device:
                signs = self._signs[index] = _signs(flat.numel(), index, flat.device)
            projected = signs.double() @ flat  # unbiased for any drift pattern, unlike sum
            sums += [projected[0], projected[1], flat.dot(flat)]
        if not sums:
            return torch.zeros(0, dtype=torch.float64), 0.0
        values = torch.stack(sums).view(-1, 3).cpu()
        return values[:, :2].reshape(-1), values[:, 2].sum().item()

    def _launch(self, step):
        import cerar
        import cerar.torch as ct
        start = time.perf_counter()
        fingerprints, square = self._fingerprints()
        mine = [square, float(step)]
        mine += ([float(self.every), self.tolerance] if cerar.rank() == 0
                 else [-math.inf, -math.inf])
        vector = torch.cat([fingerprints, -fingerprints,
                            torch.tensor(mine, dtype=torch.float64)])
        number = self._launched
        handle = ct.allreduce_async_(vector, name=f"cerar.drift.{self.prefix}.check.{number}",
                                     op=ct.Max)
        self._pending = (handle, step, number)
        self._launched += 1
        self._dirty = False
        self.stats["check_ms"] += 1000 * (time.perf_counter() - start)

    def _read(self, handle, launched, number):
        import cerar
        start = time.perf_counter()
        vector = handle.wait()
        n = (len(vector) - 4) // 2
        spread = vector[:n] + vector[n:2 * n]  # max - min of each fingerprint
        square, last_launch, every, tolerance = vector[2 * n:].tolist()
        drift = (spread.square().sum().item() / 2) ** 0.5 / max(square, 1e-300) ** 0.5
        if not self._agreed:
            if (int(every), tolerance) != (self.every, self.tolerance):
                import warnings
                warnings.warn(f"cerar drift control on rank {cerar.rank()}: using rank 0's "
                              f"CERAR_DRIFT_CHECK_EVERY={int(every)}, CERAR_DRIFT_TOLERANCE="
                              f"{tolerance:g} (this rank had {self.every}, "
                              f"{self.tolerance:g})")
            self.every, self.tolerance, self._agreed = int(every), tolerance, True
        self.stats["checks"] += 1
        self.stats["last_drift"] = drift
        self.stats["max_drift"] = max(self.stats["max_drift"], drift)
        resync = self.every > 0 and drift > self.tolerance
        self._due = (int(last_launch) + RESYNC_LAG, resync, number)
        self.stats["check_ms"] += 1000 * (time.perf_counter() - start)

    def state_tensors(self):
        """The optimizer's state tensors (momentum, Adam's moments, step counts), in order."""
        out = []
        if self._optimizer is None:
            return out
        for group in self._optimizer.param_groups:
            for p in group["params"]:
                state = self._optimizer.state.get(p, {})
                out += [state[k] for k in sorted(state, key=str) if torch.is_tensor(state[k])]
        return out

    def resync(self, name):
        """Every rank takes rank 0's parameters and optimizer state: one broadcast per
        (device, dtype) of all of them flattened."""
        start = time.perf_counter()
        tensors = [t for _, t in self._items] + self.state_tensors()
        self.stats["resync_bytes"] += _broadcast_flat(tensors, name)
        self.stats["resyncs"] += 1
        self.stats["resync_ms"] += 1000 * (time.perf_counter() - start)


def _broadcast_flat(tensors, name):
    import cerar.torch as ct
    groups = {}
    for t in tensors:
        groups.setdefault((str(t.device), str(t.dtype)), []).append(t)
    sent = 0
    for (device, dtype), members in sorted(groups.items()):
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1) for t in members])
            ct.broadcast_(flat, root_rank=0, name=f"{name}.{device}.{dtype.split('.')[-1]}")
            offset = 0
            for t in members:
                t.detach().copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
        sent += flat.numel() * flat.element_size()
    return sent


def drift_stats():
    """The drift controls of this process (DistributedOptimizer, DDP hook) by prefix: checks,
    resyncs, measured drift (last and max, relative L2), time spent (ms) and bytes resynced."""
    return {c.prefix: dict(c.stats, every=c.every, tolerance=c.tolerance, enabled=c.enabled)
            for c in list(_controls)}
