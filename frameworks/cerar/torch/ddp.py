"""A DistributedDataParallel communication hook that reduces DDP's gradient buckets through
cerar's runtime (the exact ring or CERAR, as the runtime selects):

    import cerar.torch.ddp as cddp
    model = DistributedDataParallel(model)
    cddp.register_cerar_hook(model)            # cerar.init() from the same launcher variables

Each bucket is averaged in place over all ranks under the name "ddp.<k>.<bucket index>", where
k counts the hook states of this process in creation order (so it is the same on every rank
that builds its models in the same order). The hook only submits the bucket and returns a
torch.futures.Future; a helper thread waits on the runtime's handles (the GIL released) and
completes the futures, with the CerarError as the future's exception when a bucket fails.

Drift control (cerar.torch.DriftControl) is on by default, as in DistributedOptimizer: once
the last bucket of a backward pass is reduced (on the helper thread, before backward()
returns), every K-th backward pass on which CERAR ran launches a check, and a drift over the
tolerance makes every rank take rank 0's parameters (and the optimizer's state when
register_cerar_hook got optimizer=...) before the optimizer's step.
"""
import functools
import itertools

import torch

import cerar
from cerar import Average
from cerar.torch import allreduce_async_
from cerar.torch._compat import bucket_buffer
from cerar.torch._completer import Completer

_states = itertools.count()


class CerarHookState:
    """The state argument of register_comm_hook: the bucket name prefix, and counters."""

    def __init__(self, prefix=None):
        self.prefix = prefix if prefix is not None else f"ddp.{next(_states)}"
        self.buckets_submitted = 0
        self.drift_control = None  # set by register_cerar_hook

    def name(self, bucket):
        return f"{self.prefix}.{bucket.index()}"


# Waits on the runtime's handles in submission order and completes the futures.
_completer = Completer("cerar-ddp-futures")


def _finish(handle, tensor, after):
    handle.wait()  # a CerarError sets the future's exception, so that DDP raises it here
    if after is not None:
        after()
    return tensor


def cerar_hook(state, bucket):
    """DDP communication hook: averages `bucket` over all ranks through cerar, asynchronously.

    Returns a Future whose value is the bucket's (reduced in place) flat gradient tensor.
    """
    tensor = bucket_buffer(bucket)
    future = torch.futures.Future()
    try:
        handle = allreduce_async_(tensor, name=state.name(bucket), op=Average)
    except Exception as error:  # e.g. cerar not initialized: DDP raises it from backward
        future.set_exception(error)
    else:
        state.buckets_submitted += 1
        control = getattr(state, "drift_control", None)
        # After the last bucket every earlier one is done (the helper waits in order): the
        # backward pass's gradients are all reduced, the parameters not yet stepped.
        after = control.after_step if control is not None and bucket.is_last() else None
        _completer.submit(functools.partial(_finish, handle, tensor, after), future)
    # set_exception stores the error as the future's value, which only Python's wait() raises;
    # DDP's reducer reads the value in C++. A continuation that waits turns it into the
    # future's error, so that DDP raises the CerarError's message.
    return future.then(_value)


def _value(future):
    return future.wait()


def register_cerar_hook(model, state=None, optimizer=None, drift_check_every=None,
                        drift_tolerance=None, **init_overrides):
    """Starts cerar if needed (init(**init_overrides), e.g. algorithm="ring") and registers
    cerar_hook on the DistributedDataParallel `model`. Returns the hook's state.

    optimizer: the model's optimizer, so that drift control's resync also sends its state
    (momentum, Adam's moments); without it only the parameters are resynced.
    drift_check_every, drift_tolerance: as DistributedOptimizer's (0 turns drift control off).
    """
    if not cerar.is_initialized():
        cerar.init(**init_overrides)
    state = state if state is not None else CerarHookState()
    from cerar.torch.drift import DriftControl
    module = getattr(model, "module", model)
    state.drift_control = DriftControl(list(module.named_parameters()), optimizer,
                                       drift_check_every, drift_tolerance, prefix=state.prefix)
    model.register_comm_hook(state, cerar_hook)
    return state
