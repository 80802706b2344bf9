"""cerar.keras's fit on the backend KERAS_BACKEND names (argv: mode, a folder of its own).

train: each rank fits its half of every global batch with DistributedOptimizer and every
callback; the weights must equal one process's fit of the whole batches (same initial weights,
same learning rates), the averaged metrics must be equal on every rank, rank 0 alone writes the
best model; broadcast_global_variables, broadcast and allreduce give rank 0's and the mean;
backward_passes_per_step=2 equals one process accumulating 2 steps, fp16 compression nearly
one process; load_model gives back a model whose optimizer reduces.
mismatch: rank 1's hidden layer is wider; fit must raise MismatchError on every rank."""
import os
import sys

import keras
import numpy as np

import cerar.keras as hvd
from common import check, check_close, fail

mode, folder = sys.argv[1], sys.argv[2]
hvd.init()
r, n = hvd.rank(), hvd.size()
STEPS, BATCH, EPOCHS, LR = 4, 16, 2, 0.1  # BATCH: the global batch
data = np.random.default_rng(0)
x_all = data.normal(size=(STEPS * BATCH, 5)).astype(np.float32)
y_all = (np.tanh(x_all @ data.normal(size=(5, 1))) + 0.1).astype(np.float32)
half = BATCH // n
mine = np.concatenate([np.arange(s * BATCH + r * half, s * BATCH + (r + 1) * half)
                       for s in range(STEPS)])


def model_of(seed, hidden=8):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(hidden, activation="tanh"),
                             keras.layers.Dense(1)])


def schedule():
    """Warm-up over the first epoch, then half the rate: the same for both runs."""
    return [hvd.callbacks.LearningRateWarmupCallback(LR, warmup_epochs=1, steps_per_epoch=STEPS),
            hvd.callbacks.LearningRateScheduleCallback(LR, 0.5, start_epoch=1)]


def weights(model):
    return [keras.ops.convert_to_numpy(v) for v in model.trainable_variables]


if mode == "mismatch":
    model = model_of(0, hidden=8 + r)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse")
    try:  # no broadcast (it would fail first): the step's gradients differ in shape
        model.fit(x_all[mine], y_all[mine], batch_size=half, epochs=1, shuffle=False,
                  verbose=0, callbacks=[hvd.callbacks.MetricAverageCallback()])
    except hvd.MismatchError as error:
        check("mismatch names the gradients", "gradients" in str(error), str(error))
    except Exception as error:  # noqa: B902
        fail(f"{type(error).__name__} instead of MismatchError: {error}")
    else:
        fail("fit ran with models that differ across ranks")
    check_close("runtime after the error", keras.ops.convert_to_numpy(
        hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum)), np.full(3, n))
    hvd.shutdown()
    print("keras mismatch OK", flush=True)
    sys.exit(0)

# One process on the whole batches, from rank 0's initial weights (no collective).
alone = model_of(0)
alone.compile(optimizer=keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
alone.fit(x_all, y_all, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
          callbacks=schedule())

model = model_of(r)  # differs until the broadcast
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9)),
              loss="mse")
best = os.path.join(folder, "best.keras")
history = model.fit(
    x_all[mine], y_all[mine], batch_size=half, epochs=EPOCHS, shuffle=False, verbose=0,
    validation_data=(x_all[mine[::-1]], y_all[mine[::-1]]),
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
               hvd.callbacks.MetricAverageCallback(), *schedule(),
               hvd.callbacks.BestModelCheckpoint(best, monitor="val_loss")])
for label, got, want in zip(("kernel 1", "bias 1", "kernel 2", "bias 2"), weights(model),
                            weights(alone)):
    check_close(f"{label} after fit", got, want, rtol=1e-4, atol=1e-6)
check_close("learning rate after the schedule",
            float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)), LR * 0.5,
            rtol=1e-6)
for key in ("loss", "val_loss"):  # averaged: the same on every rank
    mine_values = np.array(history.history[key], np.float64)
    every = keras.ops.convert_to_numpy(hvd.allgather(mine_values[None], name=f"h.{key}"))
    check_close(f"{key} averaged", every, np.repeat(every[:1], n, axis=0))
hvd.barrier()
check("best model written", os.path.exists(best), best)

# broadcast_global_variables: rank 0's model and optimizer state, whatever the others hold.
for v in model.variables:
    v.assign(np.full(v.shape, r + 7, keras.backend.standardize_dtype(v.dtype)))
hvd.broadcast_global_variables(0, model)
check_close("broadcast_global_variables", weights(model)[0], np.full((5, 8), 7.0))
check_close("broadcast", keras.ops.convert_to_numpy(hvd.broadcast(np.full(2, r, np.float32), 1)),
            np.full(2, 1.0))
check_close("allreduce", keras.ops.convert_to_numpy(hvd.allreduce(np.full(2, r, np.float32))),
            np.full(2, (n - 1) / 2))

# backward_passes_per_step=2 (Keras's gradient accumulation): the same update as one process
# accumulating the whole batches' gradients over 2 steps.
alone = model_of(0)
alone.compile(optimizer=keras.optimizers.SGD(LR, gradient_accumulation_steps=2), loss="mse")
alone.fit(x_all, y_all, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
model = model_of(r)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                                 backward_passes_per_step=2), loss="mse")
model.fit(x_all[mine], y_all[mine], batch_size=half, epochs=1, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
check("accumulation steps", model.optimizer.gradient_accumulation_steps == 2,
      model.optimizer.gradient_accumulation_steps)
for label, got, want in zip(("kernel 1", "bias 1", "kernel 2", "bias 2"), weights(model),
                            weights(alone)):
    check_close(f"{label} after accumulated steps", got, want, rtol=1e-4, atol=1e-6)

# Compression.fp16: the gradients travel as float16 (cast inside the step), so the weights
# match one process only to float16's precision, and stay float32.
alone = model_of(0)
alone.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
alone.fit(x_all, y_all, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
model = model_of(r)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                                 compression=hvd.Compression.fp16), loss="mse")
model.fit(x_all[mine], y_all[mine], batch_size=half, epochs=1, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
check("fp16 keeps float32", all(w.dtype == np.float32 for w in weights(model)))
for label, got, want in zip(("kernel 1", "bias 1", "kernel 2", "bias 2"), weights(model),
                            weights(alone)):
    check_close(f"{label} with fp16 gradients", got, want, atol=2e-3)

# PartialDistributedOptimizer: the output layer stays local. On data that differs per rank,
# the hidden layer's weights stay equal on every rank and the output layer's do not.
model = model_of(r)
model.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(LR),
                                                        local_layers=[model.layers[-1]]),
              loss="mse")
model.fit(x_all[mine] * (1 + r), y_all[mine], batch_size=half, epochs=1, shuffle=False,
          verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
for i, w in enumerate(weights(model)):
    every = keras.ops.convert_to_numpy(hvd.allgather(w[None], name=f"partial.{i}"))
    spread = float(np.max(np.abs(every - every[:1])))
    if i < 2:
        check_close(f"partial: shared weight {i} equal on every rank", spread, 0.0, atol=1e-6)
    else:
        check(f"partial: local weight {i} differs across ranks", spread > 1e-4, spread)

# load_model: the saved model, its optimizer reducing again; one more step on different
# data per rank keeps the replicas equal only if the gradients are averaged.
loaded = hvd.load_model(best)
check("loaded optimizer reduces", hasattr(loaded.optimizer, "_cerar_reducer"),
      type(loaded.optimizer).__mro__)
loaded.fit(x_all[mine] * (1 + r), y_all[mine], batch_size=half, epochs=1, shuffle=False,
           verbose=0)
for i, w in enumerate(weights(loaded)):
    every = keras.ops.convert_to_numpy(hvd.allgather(w[None], name=f"loaded.{i}"))
    check_close(f"loaded weight {i} equal on every rank", every,
                np.repeat(every[:1], n, axis=0), atol=1e-6)
hvd.shutdown()
print("keras fit OK", flush=True)
