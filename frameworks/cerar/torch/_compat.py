"""The parts of cerar.torch that differ between torch versions (1.13 to 2.x), kept here so that
every branch can be exercised on whichever torch is installed (tests/python/test_torch_compat.py).
"""
import torch

# torch >= 2.1: a hook that runs once backward has accumulated a parameter's gradient.
HAS_POST_ACCUMULATE_GRAD_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


def stream_of(tensor):
    """The raw CUDA stream (cudaStream_t as an int) that the runtime's device work must follow
    for `tensor`: its device's current stream. 0 for a host tensor, without touching torch.cuda,
    which CPU-only builds and machines without a GPU cannot initialise."""
    if not tensor.is_cuda:
        return 0
    return torch.cuda.current_stream(tensor.device).cuda_stream


def on_gradient_ready(parameter, hook, post_accumulate=None):
    """Calls hook() each time backward has accumulated a gradient into parameter.grad.

    Returns what must be kept alive for the hook to stay registered. post_accumulate=None
    takes the post-accumulate-grad hook where torch has it; older versions reach the same
    moment through the parameter's gradient accumulator node (the next function of a view's
    grad_fn), whose post-hook runs after the gradient has been added. That node is cached on
    the parameter only weakly, so the caller keeps the returned node alive.
    """
    if post_accumulate is None:
        post_accumulate = HAS_POST_ACCUMULATE_GRAD_HOOK
    if post_accumulate:
        return parameter.register_post_accumulate_grad_hook(lambda _parameter: hook())
    accumulator = parameter.expand_as(parameter).grad_fn.next_functions[0][0]
    accumulator.register_hook(lambda *_: hook())
    return accumulator


def bucket_buffer(bucket):
    """The flat gradient tensor of a DDP GradBucket: buffer() since torch 1.10 (get_tensor()
    before it, kept for older builds)."""
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
