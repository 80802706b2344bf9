"""Horovod's compression interface, the same for every framework layer:
``compress(tensor) -> (tensor, ctx)`` before the collective, ``decompress(tensor, ctx)`` after."""


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
