"""Elastic training (``hvd.elastic``): the names exist so that code importing them loads, but
cerar does not support changing the set of ranks yet; using any of them raises."""

_MESSAGE = ("cerar.torch.elastic: elastic training is not supported yet; restart the job with "
            "cerarrun instead (a failed collective raises HorovodInternalError)")


def _unsupported(*_args, **_kwargs):
    raise NotImplementedError(_MESSAGE)


class _Unsupported:
    def __init__(self, *_args, **_kwargs):
        raise NotImplementedError(_MESSAGE)


def run(func):
    """Horovod's decorator; here the decorated function raises when called."""
    return _unsupported


class State(_Unsupported):
    pass


class ObjectState(State):
    pass


class TorchState(ObjectState):
    pass


class ElasticSampler(_Unsupported):
    pass
