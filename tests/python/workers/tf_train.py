"""DistributedGradientTape inside tf.function, and DistributedOptimizer: each rank trains on
its half of every batch; the losses must equal one process's training on the whole batches.
SyncBatchNormalization on half a batch: the outputs and input gradients of Keras's
BatchNormalization on the whole batch. TensorFlowKerasState: restore and sync."""
import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()
STEPS, BATCH = 8, 16
data = np.random.default_rng(0)
x_all = data.normal(size=(STEPS, BATCH, 5)).astype(np.float32)
y_all = (x_all @ data.normal(size=(5, 1)) + 0.1).astype(np.float32)
start = data.normal(size=(5, 1)).astype(np.float32)


def train(xs, ys, distributed, optimizer_wrapper=None):
    """The losses of STEPS steps of linear regression with SGD (global mean loss)."""
    w = tf.Variable(start + (0.0 if r == 0 else 1.0))  # differs until broadcast
    b = tf.Variable(0.0)
    optimizer = tf.keras.optimizers.SGD(0.1)
    if optimizer_wrapper:
        optimizer = optimizer_wrapper(optimizer)
    if distributed:
        hvd.broadcast_variables([w, b], root_rank=0)
    else:
        w.assign(start)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x @ w + b - y))
        if distributed and not optimizer_wrapper:
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, [w, b])
        optimizer.apply_gradients(zip(grads, [w, b]))
        return loss

    losses = [float(step(x, y)) for x, y in zip(xs, ys)]
    return losses, w.numpy()


half = BATCH // n
mine = (x_all[:, r * half:(r + 1) * half], y_all[:, r * half:(r + 1) * half])
alone, w_alone = train(x_all, y_all, distributed=False)
for label, wrapper in (("tape", None), ("optimizer", hvd.DistributedOptimizer)):
    local, w = train(*mine, distributed=True, optimizer_wrapper=wrapper)
    together = hvd.allreduce(tf.constant(local, tf.float64), op=hvd.Average).numpy()
    check_close(f"{label} losses", together, alone, rtol=1e-5)
    check_close(f"{label} weights", w, w_alone, rtol=1e-5)


def batch_norm(layer, x):
    """The training-mode outputs of `layer` and d(weighted sum of squared outputs)/dx."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.square(y) * tf.range(1.0, 4.0))
    return y, tape.gradient(loss, x)


features = data.normal(size=(8, 3)).astype(np.float32) * 3 + 1
want_y, want_dx = batch_norm(tf.keras.layers.BatchNormalization(), tf.constant(features))
mine = slice(r * 4, (r + 1) * 4)
for label, wrap in (("eager", lambda f: f), ("function", tf.function)):
    layer = hvd.SyncBatchNormalization(fused=False)  # Keras 2's argument, accepted
    layer.build((4, 3))
    got_y, got_dx = wrap(batch_norm)(layer, tf.constant(features[mine]))
    check_close(f"sync bn {label}", got_y.numpy(), want_y.numpy()[mine], atol=1e-4)
    check_close(f"sync bn {label} grad", got_dx.numpy(), want_dx.numpy()[mine], atol=1e-4)

# PartialDistributedGradientTape: the shared layer's gradients are the ranks' mean, the local
# layer's this rank's own divided by the size (scale_local_gradients), eagerly and in a function.
shared_layer, local_layer = tf.keras.layers.Dense(2), tf.keras.layers.Dense(1)
partial_model = tf.keras.Sequential([tf.keras.Input((3,)), shared_layer, local_layer])
partial_x = tf.constant(data.normal(size=(4, 3)).astype(np.float32) + r)


def partial_grads(distributed):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(partial_model(partial_x)))
    if distributed:
        tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local_layer])
    return tape.gradient(loss, partial_model.trainable_variables)


own = [g.numpy() for g in partial_grads(False)]
mean = [hvd.allreduce(tf.constant(g), op=hvd.Average, name=f"partial.mean.{i}").numpy()
        for i, g in enumerate(own)]
for label, wrap in (("eager", lambda f: f), ("function", tf.function)):
    got = [g.numpy() for g in wrap(partial_grads)(True)]
    for i in range(2):  # the shared layer's kernel and bias
        check_close(f"partial {label} shared {i}", got[i], mean[i], rtol=1e-5)
    for i in range(2, 4):  # the local layer's, not reduced
        check_close(f"partial {label} local {i}", got[i], own[i] / n, rtol=1e-5)
# A local embedding's gradient is a tf.IndexedSlices: its values are divided, its rows kept.
embedding = tf.keras.layers.Embedding(5, 2)
embedding.build((None,))
ids = tf.constant([r, 3])


def embedding_grad(distributed):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(embedding(ids)))
    if distributed:
        tape = hvd.PartialDistributedGradientTape(tape, local_layers=embedding)
    return tape.gradient(loss, embedding.trainable_variables)[0]


own_slices = embedding_grad(False)
for label, wrap in (("eager", lambda f: f), ("function", tf.function)):
    got = wrap(embedding_grad)(True)
    check(f"partial {label} slices", isinstance(got, tf.IndexedSlices), type(got))
    check_close(f"partial {label} slice rows", got.indices.numpy(), own_slices.indices.numpy())
    check_close(f"partial {label} slice values", got.values.numpy(),
                own_slices.values.numpy() / n, rtol=1e-6)
try:
    hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[object()])
    raise AssertionError("a local layer that is not a Keras layer was accepted")
except ValueError:
    pass

# elastic.TensorFlowKerasState without an elastic driver: commit saves, restore assigns the
# commit back, sync makes every rank's variables (model's and optimizer's) rank 0's.
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
model.layers[0].kernel.assign(tf.fill([3, 2], float(r)))
sgd = tf.keras.optimizers.SGD(0.1, momentum=0.9)
sgd.build(model.trainable_variables)
state = hvd.elastic.TensorFlowKerasState(model, sgd, epoch=r)
state.commit()
model.layers[0].kernel.assign(tf.fill([3, 2], 7.0))
state.epoch = 9
state.restore()
check_close("elastic restore", model.layers[0].kernel.numpy(), np.full((3, 2), float(r)))
check_close("elastic restore epoch", state.epoch, r)
state.sync()
check_close("elastic sync", model.layers[0].kernel.numpy(), np.zeros((3, 2)))
check_close("elastic sync epoch", state.epoch, 0)
hvd.shutdown()
print("tf train OK", flush=True)
