"""Elastic training on torch, Horovod's ``hvd.elastic`` (docs/elastic.md):

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=state.batch):
                ...
                state.sampler.record_batch(state.batch, batch_size)
                if state.batch % commit_every == 0:
                    state.commit()
            state.batch = 0
            state.sampler.set_epoch(state.epoch + 1)

The framework-free pieces (run, State, ObjectState, the errors) are cerar.elastic's.
"""
import copy
import math

import torch

from cerar.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           ObjectState, State, run, run_fn)

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "HorovodInternalError"]


def _rank_and_size():
    import cerar
    if cerar.is_initialized():
        return cerar.rank(), cerar.size()
    return 0, 1


class ElasticSampler(torch.utils.data.Sampler):
    """Shards `dataset` by rank, remembers the samples processed in committed steps, and after
    a reset shards what is left of the epoch over the new ranks: every sample of an epoch is
    processed once in committed steps.

    Rank r takes positions r, r + n, r + 2n, ... of the epoch's order (shuffled with seed +
    epoch), padded by repetition so that every rank has as many samples. record_batch records
    the batch of *every* rank, so all ranks hold the same record and a lost rank's committed
    progress survives it; record_indices likewise expects every rank's indices (a sync after a
    reset keeps rank 0's record, as it keeps rank 0's model)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: nothing processed yet, a new order."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records batch `batch_idx` (of `batch_size` samples per rank) of every rank."""
        start = batch_idx * batch_size * self.num_replicas
        end = min(start + batch_size * self.num_replicas, self.total_size)
        self.record_indices(self.remaining_indices[start:end])

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's samples of batch `batch_idx`."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Shards the epoch's unprocessed samples over the current ranks."""
        rank, size = _rank_and_size()
        self._shard(rank, size)

    def _shard(self, rank, num_replicas):
        self.rank, self.num_replicas = rank, num_replicas
        left = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(left), generator=generator).tolist()
            left = [left[i] for i in order]
        self.num_samples = math.ceil(len(left) / num_replicas)
        self.total_size = self.num_samples * num_replicas
        padding = self.total_size - len(left)
        # Repeats from the start (as often as needed when fewer samples than ranks are left).
        self.remaining_indices = left + (left * (padding // max(len(left), 1) + 1))[:padding]
        self.indices = self.remaining_indices[rank:self.total_size:num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


class _Handler:
    """Saves, restores and syncs one attribute of a TorchState that is not a plain value:
    all of them keep a copy of their state_dict; each subclass syncs its own way."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def reset(self):
        """After a reset, before the sync (the size may have changed)."""


class _ModelHandler(_Handler):
    def sync(self):
        from cerar.torch import broadcast_parameters
        broadcast_parameters(self.value.state_dict(), root_rank=0,
                             prefix="cerar.elastic.model")


class _OptimizerHandler(_Handler):
    def sync(self):
        from cerar.torch import broadcast_optimizer_state
        broadcast_optimizer_state(self.value, root_rank=0, name="cerar.elastic.optimizer")

    def reset(self):
        # A DistributedOptimizer still holds the reductions that failed with the old runtime.
        getattr(self.value, "_forget_pending", lambda: None)()


class _SamplerHandler(_Handler):
    def sync(self):
        """Rank 0's record, which goes with rank 0's model: a rank whose last step failed
        half-way may have committed one step more or less than rank 0 (and every rank's
        record covers all ranks' batches, so no union is needed)."""
        from cerar.torch import broadcast_object
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0,
                                                    name="cerar.elastic.sampler"))

    def reset(self):
        self.value.reset()


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(ObjectState):
    """A model's and an optimizer's state (and those of any other Module, Optimizer or
    ElasticSampler attribute) plus plain attributes, kept across resets: state_dicts copied
    at save and loaded at restore; at sync the parameters and optimizer state are broadcast
    from rank 0 (broadcast_parameters, broadcast_optimizer_state), and so are the samplers'
    records."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:  # a new model (or optimizer, sampler): its state is the commit
            handlers[name].value = value
            handlers[name].save()
        super().__setattr__(name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()
