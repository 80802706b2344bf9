"""An elastic Keras worker for test_keras.py (started by elastic_fake_driver.FakeDriver): fits a
tiny model with cerar.keras.elastic's state and callbacks, a commit after every batch, and
prints one JSON line at the end: its weights' bytes, the epochs done, and how many resets and
restores it went through."""
import json
import os
import sys
import time

import keras
import numpy as np

import cerar.keras as hvd
from common import count_resets

EPOCHS, BATCH = 3, 4
hvd.init()
data = np.random.default_rng(0)
x_all = data.normal(size=(96, 4)).astype(np.float32)
y_all = x_all.sum(1, keepdims=True)
keras.utils.set_random_seed(1 + hvd.rank())  # different replicas: the first sync must fix it
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
              loss="mse")
state = hvd.elastic.KerasState(model, epoch=0, batch=0)
counts = count_resets(state)


def announce(batch, logs):
    print(f"step {state.epoch} {batch} size {hvd.size()}", flush=True)
    time.sleep(0.05)


@hvd.elastic.run
def train(state):
    rank, size = hvd.rank(), hvd.size()
    model.fit(x_all[rank::size], y_all[rank::size], batch_size=BATCH, epochs=EPOCHS,
              initial_epoch=state.epoch, shuffle=False, verbose=0,
              callbacks=[hvd.elastic.UpdateBatchStateCallback(state),
                         hvd.elastic.UpdateEpochStateCallback(state),
                         hvd.elastic.CommitStateCallback(state),
                         keras.callbacks.LambdaCallback(on_train_batch_end=announce)])


train(state)
weights = [keras.ops.convert_to_numpy(v).tobytes().hex() for v in model.variables]
print(json.dumps({"id": os.environ.get("CERAR_ELASTIC_ID"), "rank": hvd.rank(),
                  "size": hvd.size(), "epoch": state.epoch, "weights": weights, **counts}),
      flush=True)
sys.exit(0)
