"""Data-parallel JAX training with the whole train step under jax.jit: gradients, their
all-reduce (one grouped request for the pytree) and the update are one compiled function.

    cerarrun -np 4 python examples/jax_train.py
    cerarrun -np 4 --algorithm ring python examples/jax_train.py --steps 200
    cerarrun -np 4 python examples/jax_train.py --measure 200

--measure N times rounds of N all-reduces inside jit against the same outside jit, and of the
jitted step against the same step split around outside-jit collectives, the two alternating
(rank 0 prints the medians).
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import cerar.jax as cj


def init_params(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)}
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def predict(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


def sgd(params, grads, lr=0.1):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


@jax.jit
def train_step(params, x, y):
    """One step as one compiled program: every rank's gradients averaged inside it."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    grads = cj.allreduce_tree(grads, name="grads")
    return sgd(params, grads), cj.allreduce(loss, name="loss")


def shard(rank, size, samples=4096, features=16):
    """This rank's part of a synthetic regression problem (the same teacher everywhere)."""
    teacher = jax.random.normal(jax.random.PRNGKey(42), (features, 1)) / np.sqrt(features)
    x = jax.random.normal(jax.random.PRNGKey(rank), (samples // size, features))
    return x, jnp.sin(x @ teacher)


def side_by_side(first, second, rounds=7):
    """Medians over rounds of each function's seconds per call (each runs one round of calls);
    the two alternate, so that a change in the machine's load falls on both."""
    times = [(first(), second()) for _ in range(rounds)]
    return tuple(float(np.median(column)) for column in zip(*times))


def measure(params, x, y, calls):
    small, large = jnp.ones(256, jnp.float32), jnp.ones(1 << 20, jnp.float32)
    inside = jax.jit(lambda v: cj.allreduce(v, name="inside"))
    loss_and_grad, apply = jax.jit(jax.value_and_grad(loss_fn)), jax.jit(sgd)

    def split_step():
        """train_step's work with its two collectives outside jit."""
        loss, grads = loss_and_grad(params, x, y)
        return apply(params, cj.allreduce_tree(grads, name="grads")), cj.allreduce(loss)

    def timed(call):
        def round_():
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(call())
            return (time.perf_counter() - start) / calls
        jax.block_until_ready(call())  # compile, and meet every rank
        return round_

    rows = []
    for label, v in [("allreduce 1 KiB", small), ("allreduce 4 MiB", large)]:
        rows.append((label, *side_by_side(timed(lambda: inside(v)),
                                          timed(lambda: cj.allreduce(v, name="outside")))))
    rows.append(("train step", *side_by_side(timed(lambda: train_step(params, x, y)),
                                             timed(split_step))))
    if cj.rank() == 0:
        print(f"{'':16} {'inside jit':>12} {'outside jit':>12} {'ratio':>7}")
        for label, a, b in rows:
            print(f"{label:16} {a * 1e6:9.0f} us {b * 1e6:9.0f} us {a / b:7.2f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--measure", type=int, default=0, metavar="N")
    args = parser.parse_args()
    cj.init()
    rank, size = cj.rank(), cj.size()
    params = cj.broadcast_tree(init_params(jax.random.PRNGKey(rank), [16, 64, 64, 1]),
                               root_rank=0)
    x, y = shard(rank, size)
    if args.measure:
        measure(params, x, y, args.measure)
    else:
        for step in range(args.steps):
            params, loss = train_step(params, x, y)
            if rank == 0 and (step % 20 == 0 or step == args.steps - 1):
                print(f"step {step}: mean loss {float(loss):.5f}", flush=True)
    cj.shutdown()


if __name__ == "__main__":
    main()
