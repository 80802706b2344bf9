"""Gradient compression with Horovod's interface: ``compress(tensor) -> (tensor, ctx)`` before
the collective and ``decompress(tensor, ctx)`` after it. The casts run here in Python."""
import torch


class Compressor:
    """The interface: subclasses override both static methods."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Floating tensors travel as `wire`; the context is the dtype to restore. Other dtypes
    pass unchanged (a cast would lose integers)."""
    wire = None

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


class BF16Compressor(_CastCompressor):
    wire = torch.bfloat16


class Compression:
    """The compressors by name, as ``Compression.fp16`` in Horovod code."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
