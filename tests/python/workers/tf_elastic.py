"""An elastic TensorFlow worker for test_tensorflow.py (started by elastic_fake_driver's
FakeDriver): a custom training loop, DistributedGradientTape inside tf.function, the model's
and a plain optimizer's variables in a TensorFlowState committed after every step. Prints one
JSON line at the end: its variables' bytes, the steps done and its resets and restores."""
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from common import count_resets

STEPS = 40
hvd.init()
rows = np.random.default_rng(0).normal(size=(96, 4)).astype(np.float32)
targets = rows.sum(1, keepdims=True)
tf.random.set_seed(1 + hvd.rank())  # different replicas: the first sync must make them equal
weight = tf.Variable(tf.random.normal([4, 1]), name="weight")
bias = tf.Variable(tf.random.normal([1]), name="bias")
velocity = [tf.Variable(tf.zeros_like(v)) for v in (weight, bias)]  # momentum, by hand
state = hvd.elastic.TensorFlowState([weight, bias, *velocity], step=0)
counts = count_resets(state)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ weight + bias - y) ** 2)
    grads = hvd.DistributedGradientTape(tape).gradient(loss, [weight, bias])
    for variable, v, g in zip((weight, bias), velocity, grads):
        v.assign(0.9 * v + g)
        variable.assign_sub(0.05 * v)
    return loss


@hvd.elastic.run
def train(state):
    while state.step < STEPS:
        rank, size = hvd.rank(), hvd.size()
        batch = np.arange(state.step * 8, state.step * 8 + 8) % len(rows)
        mine = batch[rank::size]
        train_step(tf.constant(rows[mine]), tf.constant(targets[mine]))
        state.step += 1
        state.commit()
        print(f"step {state.step} size {size}", flush=True)
        time.sleep(0.05)


train(state)
values = [v.numpy().tobytes().hex() for v in (weight, bias, *velocity)]
print(json.dumps({"id": os.environ.get("CERAR_ELASTIC_ID"), "rank": hvd.rank(),
                  "size": hvd.size(), "step": state.step, "values": values, **counts}),
      flush=True)
sys.exit(0)
