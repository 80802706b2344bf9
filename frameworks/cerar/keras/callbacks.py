"""Horovod's Keras callbacks on Keras 3 (every backend). Each is a keras.callbacks.Callback;
reading or assigning variables goes through `self.model`, which on JAX first syncs the jitted
step's state into the variables (and makes the next step read them back)."""
import keras
import numpy as np

import cerar
import cerar.numpy as cn
from cerar.keras import _errors
from cerar.keras._variables import broadcast_variables, model_variables


class _Callback(keras.callbacks.Callback):
    """Every callback here makes fit() raise cerar's error classes for a failed collective
    inside the compiled step (cerar/keras/_errors.py)."""

    def on_train_begin(self, logs=None):
        _errors.install(self.model)


class BroadcastGlobalVariablesCallback(_Callback):
    """Before the first step, root_rank's model and optimizer variables on every rank, so
    that all ranks start from one state."""

    def __init__(self, root_rank=0, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.broadcast_done:  # a second fit() continues from the state reached
            return
        broadcast_variables(model_variables(self.model), self.root_rank,
                            "keras.broadcast_global_variables")
        self.broadcast_done = True


class MetricAverageCallback(_Callback):
    """At each epoch's end, every metric in the logs averaged over the ranks (one all-reduce),
    so that later callbacks (checkpoints, early stopping, the learning rate) see the same
    values on every rank. Put it before them."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs or cerar.size() == 1:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in names], np.float64)
        averaged = cn.allreduce(values, op=cerar.Average, name="keras.metric_average")
        logs.update({k: float(v) for k, v in zip(names, averaged)})


def _set_learning_rate(optimizer, value):
    if isinstance(optimizer.learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        raise cerar.InvalidArgumentError("cerar.keras: the learning-rate callbacks set the "
                                         "optimizer's learning rate, which here is a schedule")
    optimizer.learning_rate = value


class LearningRateScheduleCallback(_Callback):
    """learning rate = initial_lr * multiplier(epoch) from start_epoch to end_epoch (not
    included): at each epoch's start (staircase), or at each batch with the epoch's fraction
    done (steps_per_epoch, or the fit's steps). `multiplier` is a function of the epoch or a
    constant. momentum_correction is Horovod's and has no effect: a Keras 3 optimizer's
    momentum is a constant of the compiled step."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase, self.steps_per_epoch, self.verbose = staircase, steps_per_epoch, verbose
        self.current_epoch = None

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        value = self.initial_lr * self.multiplier(epoch)
        _set_learning_rate(self.model.optimizer, value)
        return value

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.steps_per_epoch is None:
            self.steps_per_epoch = self.params.get("steps") if self.params else None

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self._active(epoch) and (self.staircase or not self.steps_per_epoch):
            value = self._adjust(epoch)
            if self.verbose and cerar.rank() == 0:
                print(f"\nEpoch {epoch}: learning rate {value:g}")

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self.steps_per_epoch or not self._active(self.current_epoch):
            return
        self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goyal et al.'s warm-up, as Horovod's: the learning rate rises from initial_lr / size to
    initial_lr over warmup_epochs, batch by batch (initial_lr: the rate for all ranks, already
    scaled by the number of ranks)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            size = cerar.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose and cerar.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{self.initial_lr:g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """keras.callbacks.ModelCheckpoint(save_best_only=True) on rank 0 only: the other ranks
    would write the same model (put MetricAverageCallback before it, so that `monitor` is the
    average over the ranks)."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, mode="auto",
                 save_freq="epoch"):
        super().__init__(filepath, monitor=monitor, verbose=verbose, mode=mode,
                         save_freq=save_freq, save_best_only=True)

    def _save_model(self, *args, **kwargs):
        if cerar.rank() == 0:
            super()._save_model(*args, **kwargs)
