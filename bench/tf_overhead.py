"""Per-tensor cost of cerar.tensorflow's allreduce: eagerly, inside tf.function (one
numpy_function op per tensor, or one grouped op for all), and cerar.numpy's on the same arrays,
so the difference is what the TensorFlow layer adds.

    cerarrun -np 2 python bench/tf_overhead.py [--tensors 32] [--elements 1024] [--repeat 20]

Rank 0 prints one line per way, microseconds per tensor (the median of --repeat rounds).
"""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import cerar.numpy as cn  # noqa: E402
import cerar.tensorflow as hvd  # noqa: E402


def median_us(run, tensors, repeat):
    run()  # warm-up (tracing)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times)) / tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--elements", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    xs = [tf.fill([args.elements], float(i)) for i in range(args.tensors)]
    arrays = [x.numpy() for x in xs]

    def numpy_each():
        return [cn.allreduce(a, name=f"np.{i}") for i, a in enumerate(arrays)]

    def eager_each():
        return [hvd.allreduce(x, name=f"eager.{i}") for i, x in enumerate(xs)]

    @tf.function
    def function_each(ts):
        return [hvd.allreduce(t, name=f"fn.{i}") for i, t in enumerate(ts)]

    @tf.function
    def function_grouped(ts):
        return hvd.grouped_allreduce(ts, name="fn.grouped")

    ways = {"cerar.numpy allreduce": numpy_each, "eager allreduce": eager_each,
            "tf.function allreduce": lambda: function_each(xs),
            "eager grouped_allreduce": lambda: hvd.grouped_allreduce(xs, name="eager.grouped"),
            "tf.function grouped_allreduce": lambda: function_grouped(xs)}
    for label, run in ways.items():
        us = median_us(run, args.tensors, args.repeat)
        if hvd.rank() == 0:
            print(f"{label}: {us:.1f} us per tensor ({args.tensors} tensors of "
                  f"{args.elements} float32, {hvd.size()} ranks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
