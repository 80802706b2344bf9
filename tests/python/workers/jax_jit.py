"""cerar.jax inside jax.jit on every rank. `jax_jit.py ring|cerar`; prints "jax jit OK".

ring: a jitted MLP train step equals bit for bit the same step with its all-reduce outside jit;
recompiling for new shapes; two all-reduces in an order chosen by data; allgather, broadcast,
broadcast_tree, a process set and constants inside jit; a shape mismatch inside jit fails every
rank with MismatchError named in the error. cerar: the jitted CERAR all-reduce equals the
outside-jit one and stays within its predicted bound.
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import cerar
import cerar.jax as cj
from common import check, check_close

mode = sys.argv[1]
U = np.finfo(np.float32).eps / 2


def mlp_loss(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def update(params, grads):
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def train_step(params, x, y):
    """grad, all-reduce (one grouped request), update: the whole step under jax.jit."""
    return update(params, cj.allreduce_tree(jax.grad(mlp_loss)(params, x, y), name="grads"))


def split_step(grad, apply):
    """The same step with its collective outside jit (the local parts jitted alone, as the
    fused step compiles them: the callback is a boundary XLA fuses nothing across)."""
    def step(params, x, y):
        return apply(params, cj.allreduce_tree(grad(params, x, y), name="grads"))
    return step


def check_mlp(r):
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    params = cj.broadcast_tree({"w1": jax.random.normal(keys[0], (8, 16)) * r,
                                "b1": jnp.zeros(16), "w2": jax.random.normal(keys[1], (16, 2)),
                                "b2": jnp.zeros(2)}, root_rank=0)
    x = jax.random.normal(jax.random.fold_in(keys[2], r), (32, 8))
    y = jax.random.normal(jax.random.fold_in(keys[3], r), (32, 2))
    eager, jitted = params, params
    step, reference = jax.jit(train_step), split_step(jax.jit(jax.grad(mlp_loss)), jax.jit(update))
    for _ in range(3):
        eager = reference(eager, x, y)
        jitted = step(jitted, x, y)
    for key in params:
        a, b = np.asarray(eager[key]), np.asarray(jitted[key])
        check(f"mlp {key}", np.array_equal(a, b),
              f"jitted differs from op by op by {np.max(np.abs(a - b)):g}")
    everyone = cj.allgather(jnp.asarray(jitted["w1"])[None])
    check("mlp same params on every rank", all(np.array_equal(everyone[0], e) for e in everyone))


def check_recompile(r, n):
    double_sum = jax.jit(lambda x: cj.allreduce(2 * x, op=cj.Sum))
    named = jax.jit(lambda x: cj.allreduce(x, op=cj.Sum, name="fixed"))
    for shape in [(3,), (5, 2), (3,), (2, 2, 2)]:
        x = jnp.full(shape, float(r + 1), jnp.float32)
        check_close(f"recompile {shape}", double_sum(x), np.full(shape, n * (n + 1.0)))
        check_close(f"named {shape}", named(x), np.full(shape, n * (n + 1) / 2))
    constant = jax.jit(lambda: cj.allreduce(jnp.full(2, 3.0), op=cj.Sum))
    check("a constant's all-reduce runs with the program, not when tracing",
          "io_callback" in str(jax.make_jaxpr(constant)()))
    check_close("a constant in jit", constant(), np.full(2, 3.0 * n))
    check_close("int32 in jit", jax.jit(lambda x: cj.allreduce(x, op=cj.Max))(
        jnp.array([r, -r], jnp.int32)), [n - 1, 0])


def check_data_dependent_order(r, n):
    """The branch (hence which all-reduce comes first) follows a value, the same on every
    rank; the two in the other function have no data dependence between them."""
    def first_a(a, b):
        ra = cj.allreduce(a, op=cj.Sum)
        return ra, cj.allreduce(b, op=cj.Sum)

    def first_b(a, b):
        rb = cj.allreduce(b, op=cj.Sum)
        return cj.allreduce(a, op=cj.Sum), rb

    @jax.jit
    def both(a, b, flag):
        return lax.cond(flag > 0, first_a, first_b, a, b)

    independent = jax.jit(lambda a, b: (cj.allreduce(a * 3, op=cj.Sum),
                                        cj.allreduce(b + 1, op=cj.Sum)))
    a, b = jnp.full(4, float(r)), jnp.full(7, float(r + 1))
    for step in range(4):
        ra, rb = both(a, b, jnp.float32(step % 2))
        check_close(f"order {step} a", ra, np.full(4, n * (n - 1) / 2))
        check_close(f"order {step} b", rb, np.full(7, n * (n + 1) / 2))
        ra, rb = independent(a, b)
        check_close(f"independent {step}", rb, np.full(7, n * (n + 1) / 2 + n))


def check_others(r, n, halves):
    gather = jax.jit(lambda x: cj.allgather(x * 2))
    check_close("allgather in jit", gather(jnp.full((2, 3), float(r))),
                np.repeat(np.arange(n, dtype=np.float32) * 2, 2)[:, None] * np.ones(3))
    check_close("broadcast in jit", jax.jit(lambda x: cj.broadcast(x + 1, root_rank=n - 1))(
        jnp.full(3, float(r))), np.full(3, float(n)))
    try:
        gather(jnp.full((r + 1, 3), 1.0)).block_until_ready()
    except Exception as error:  # 10 rows on every rank, where each traced 4 * (r + 1)
        check("allgather of other sizes", "InvalidArgumentError" in str(error), str(error)[-300:])
    else:
        check("allgather of other sizes", False, "no error")
    same = jax.jit(lambda t: cj.broadcast_tree(t, root_rank=1))(
        {"w": jnp.full((2, 2), float(r)), "k": jnp.arange(3, dtype=jnp.int32) * r})
    check_close("broadcast_tree in jit", same["w"], np.ones((2, 2)))
    check_close("broadcast_tree int in jit", same["k"], np.arange(3))
    half = halves[r // 2]
    check_close("process set in jit",
                jax.jit(lambda x: cj.allreduce(x, op=cj.Sum, process_set=half))(
                    jnp.full(2, float(r))), np.full(2, float(sum(half.ranks))))
    tree = jax.jit(lambda t: cj.allreduce_tree(t, op=cj.Sum))(
        {"f": jnp.full(3, float(r)), "i": jnp.arange(2, dtype=jnp.int32) + r})
    check_close("tree of two dtypes in jit", tree["i"], np.arange(2) * n + n * (n - 1) / 2)
    check("empty tree in jit", jax.jit(lambda t: cj.allreduce_tree(t))({}) == {})


def check_mismatch(r, n):
    try:
        jax.jit(lambda x: cj.allreduce(x, name="mismatched"))(jnp.ones(4 + r)).block_until_ready()
    except Exception as error:  # JAX wraps what the callback raised
        check("mismatch names MismatchError", "MismatchError" in str(error), str(error)[-500:])
    else:
        check("mismatch", False, "no error for shapes that differ across ranks")
    check_close("after the mismatch", jax.jit(lambda x: cj.allreduce(x, op=cj.Sum))(
        jnp.ones(3)), np.full(3, float(n)))


def check_cerar(r, n):
    rng = np.random.default_rng(r)
    x = rng.standard_normal(300_000).astype(np.float32)
    jitted = np.asarray(jax.jit(lambda g: cj.allreduce(g, op=cj.Sum, name="g"))(jnp.asarray(x)))
    outside = np.asarray(cj.allreduce(jnp.asarray(x), op=cj.Sum, name="g"))
    check("cerar jit equals outside jit", np.array_equal(jitted, outside))
    stats = cerar.stats()
    check("cerar ran", stats["cerar_buffers"] > 0, stats)
    check("measured within predicted",
          0 < stats["measured_error_max"] <= stats["predicted_error_max"], stats)
    everyone = np.asarray(cj.allgather(jnp.asarray(x)[None]), np.float64)
    magnitude = np.abs(everyone).sum(axis=0).max()
    bound = (stats["predicted_error_max"] + 2 * (n - 1) * U) * magnitude
    error = float(np.abs(jitted - everyone.sum(axis=0)).max())
    check("cerar within its bound", error <= bound, f"{error:g} > {bound:g}")


if mode == "ring":
    halves = [cj.ProcessSet([0, 1]), cj.ProcessSet([2, 3])]
    cj.init(algorithm="ring", process_sets=halves, timeout_seconds=20)
    r, n = cj.rank(), cj.size()
    check_mlp(r)
    check_recompile(r, n)
    check_data_dependent_order(r, n)
    check_others(r, n, halves)
    check_mismatch(r, n)
    # not waited for: shutdown() must let its callback finish
    pending = jax.jit(lambda x: cj.allreduce(x, op=cj.Sum, name="last"))(jnp.ones(5))
else:
    cj.init(algorithm="cerar", components=16, debug_error=True)
    check_cerar(cj.rank(), cj.size())
cj.shutdown()
if mode == "ring":
    check_close("a jitted call pending at shutdown", pending, np.full(5, float(n)))
print("jax jit OK", flush=True)
