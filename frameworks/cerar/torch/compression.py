"""Gradient compression with Horovod's interface: ``compress(tensor) -> (tensor, ctx)`` before
the collective and ``decompress(tensor, ctx)`` after it.

An all-reduce of float32 CPU tensors with ``Compression.fp16`` or ``bf16`` does not cast here:
it asks the runtime for that 16-bit wire (docs/wires.md), which halves the bytes sent and adds
in float32 at every hop. Other dtypes, device tensors and the other collectives cast here, in
Python, and reduce the 16-bit tensors."""
import torch

from cerar._compression import Compressor, NoneCompressor  # noqa: F401


class _CastCompressor(Compressor):
    """Floating tensors travel as `wire`; the context is the dtype to restore. Other dtypes
    pass unchanged (a cast would lose integers)."""
    wire = None
    runtime_wire = None  # the runtime's name of the same format

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.to(cls.wire), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    wire = torch.float16
    runtime_wire = "fp16"


class BF16Compressor(_CastCompressor):
    wire = torch.bfloat16
    runtime_wire = "bf16"


def runtime_wire(compression, tensors):
    """The runtime's wire ("fp16" or "bf16") that all-reduces `tensors` under `compression`
    in place of the Python cast, or None: only float32 CPU tensors, all of them."""
    name = getattr(compression, "runtime_wire", None)
    if name and tensors and all(t.dtype == torch.float32 and t.device.type == "cpu"
                                for t in tensors):
        return name
    return None


class Compression:
    """The compressors by name, as ``Compression.fp16`` in Horovod code."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
