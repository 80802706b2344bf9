"""Trains a Keras 3 MLP with cerar.keras's model.fit on any Keras backend (KERAS_BACKEND=
tensorflow, jax or torch), on a synthetic 10-class task (a fixed random teacher labels Gaussian
inputs). Horovod's Keras recipe with one changed import:

    KERAS_BACKEND=jax cerarrun -np 2 python examples/keras_train.py --epochs 3

Every rank starts from rank 0's weights (BroadcastGlobalVariablesCallback), fits its own shard
of the data, and averages its gradients through cerar inside Keras's train step; the learning
rate (scaled by the size) warms up over the first epoch. Rank 0 prints as the last line
"RESULT {json}" (the final loss, held-out accuracy, the median step time after the first
epoch). --no-reduce trains without the all-reduce (each rank alone: bench/keras_overhead.py
takes the difference as the all-reduce's share of the step).
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

import cerar.keras as hvd  # noqa: E402

FEATURES, CLASSES = 32, 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05, help="per rank, scaled by the size")
    parser.add_argument("--no-reduce", action="store_true",
                        help="no DistributedOptimizer (each rank trains alone)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_data(count, seed, inputs_seed):
    """Inputs and the labels of the teacher of `seed` (the same on every rank)."""
    teacher = np.random.default_rng(seed).normal(size=(FEATURES, CLASSES)).astype(np.float32)
    x = np.random.default_rng(inputs_seed).normal(size=(count, FEATURES)).astype(np.float32)
    return x, np.argmax(np.tanh(x) @ teacher, axis=1).astype(np.int32)


class StepTimes(keras.callbacks.Callback):
    """Wall time of each training step after the first epoch (compilation, warm-up)."""

    def __init__(self):
        super().__init__()
        self.times, self.epoch, self.started = [], 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch > 0:
            self.times.append(time.perf_counter() - self.started)


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(args.seed + rank)  # ranks differ until the broadcast
    x, y = make_data(args.steps * args.batch_size, args.seed, 1000 + rank)  # this rank's shard
    x_test, y_test = make_data(2048, args.seed, 999)
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(args.hidden, activation="relu"),
                              keras.layers.Dense(args.hidden, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    lr = args.lr * size
    optimizer = keras.optimizers.SGD(lr, momentum=0.9)
    if not args.no_reduce:
        optimizer = hvd.DistributedOptimizer(optimizer)
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = StepTimes()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=1,
                                                          steps_per_epoch=args.steps),
                 times]
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=False,
                        callbacks=callbacks, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=512, verbose=0)
    step = float(np.median(times.times)) if times.times else float("nan")
    if rank == 0:
        for epoch, loss in enumerate(history.history["loss"]):
            print(f"epoch {epoch}: loss {loss:.4f}", flush=True)
        print("RESULT " + json.dumps({
            "backend": keras.backend.backend(), "size": size, "reduce": not args.no_reduce,
            "batch_per_rank": args.batch_size, "loss": round(history.history["loss"][-1], 4),
            "accuracy": round(float(accuracy), 4), "step_ms": round(step * 1e3, 3)}),
            flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
