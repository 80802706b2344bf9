"""Trains a Keras MLP with cerar.tensorflow: a custom loop, DistributedGradientTape inside
tf.function, on a synthetic 10-class task (a fixed random teacher labels Gaussian inputs).

    cerarrun -np 4 python examples/tensorflow_train.py --steps 200

Every rank starts from rank 0's weights (broadcast_variables) and trains on its own shard of
each global batch; the gradients are averaged in one fused all-reduce per step. Rank 0 prints
the loss now and then, and as the last line "RESULT {json}" (final loss and accuracy on held-out
data, the median step time).
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import cerar.tensorflow as hvd  # noqa: E402

FEATURES, CLASSES = 32, 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05, help="per rank, scaled by the size")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads per rank")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_data(count, seed, inputs_seed):
    """Inputs and the labels of the teacher of `seed` (the same on every rank)."""
    teacher = np.random.default_rng(seed).normal(size=(FEATURES, CLASSES)).astype(np.float32)
    x = np.random.default_rng(inputs_seed).normal(size=(count, FEATURES)).astype(np.float32)
    return x, np.argmax(np.tanh(x) @ teacher, axis=1).astype(np.int32)


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tf.keras.utils.set_random_seed(args.seed + rank)  # ranks differ until the broadcast

    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)),
                                 tf.keras.layers.Dense(args.hidden, activation="relu"),
                                 tf.keras.layers.Dense(CLASSES)])
    optimizer = tf.keras.optimizers.SGD(args.lr * size, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    global_batch = args.batch_size * size
    x_all, y_all = make_data(args.steps * global_batch, args.seed, 1)
    times = []
    for s in range(args.steps):
        at = s * global_batch + rank * args.batch_size
        start = time.perf_counter()
        loss = float(step(x_all[at:at + args.batch_size], y_all[at:at + args.batch_size]))
        times.append(time.perf_counter() - start)
        if rank == 0 and (s % max(1, args.steps // 5) == 0 or s == args.steps - 1):
            print(f"step {s}: loss {loss:.4f}", flush=True)

    x_test, y_test = make_data(2000, args.seed, 2)
    logits = model(x_test, training=False)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
    # Every rank must hold the same weights: their sums agree.
    total = sum(float(tf.reduce_sum(v)) for v in model.variables)
    spread = hvd.allreduce(tf.constant(total, tf.float64), op=hvd.Max).numpy() - \
        hvd.allreduce(tf.constant(total, tf.float64), op=hvd.Min).numpy()
    if rank == 0:
        result = {"ranks": size, "steps": args.steps, "final_loss": round(loss, 5),
                  "test_accuracy": round(accuracy, 4),
                  "step_ms_median": round(1000 * float(np.median(times[len(times) // 5:])), 3),
                  "weights_spread": float(spread), "tensorflow": tf.__version__}
        print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
