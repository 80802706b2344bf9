"""Gradient compression with Horovod's interface: ``compress(tensor) -> (tensor, ctx)`` before
the collective and ``decompress(tensor, ctx)`` after it. fp16 casts floating tensors in
TensorFlow before they reach the runtime and back after (halving the bytes sent)."""
import tensorflow as tf

from cerar._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Floating tensors travel as float16; the context is the dtype to restore. Other dtypes
    pass unchanged (a cast would lose integers)."""

    @staticmethod
    def compress(tensor):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The compressors by name, as ``Compression.fp16`` in Horovod code."""
    none = NoneCompressor
    fp16 = FP16Compressor
