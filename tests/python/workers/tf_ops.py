"""cerar.tensorflow on every rank: each collective eagerly and inside tf.function, allreduce's
dtypes x ops against a float64 numpy reference, gradients, IndexedSlices, process sets, the
rank ops."""
import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from common import check, check_close

singles = [hvd.ProcessSet([0]), hvd.ProcessSet([1])]
hvd.init(process_sets=singles)
r, n = hvd.rank(), hvd.size()
check("size", n == 2, f"run with 2 ranks, got {n}")
MODES = {"eager": lambda f: f, "function": tf.function}


def rank_data(rank, dtype, shape=(3, 4)):
    """Rank `rank`'s input: small values, so integer sums and products stay exact."""
    values = (np.arange(np.prod(shape)).reshape(shape) % 5 + rank + 1).astype(np.float64)
    if dtype in ("uint8", "bool"):
        return values.astype(dtype)
    return values.astype(tf.as_dtype(dtype).as_numpy_dtype)


def reference(dtype, op, pre=1.0, post=1.0):
    """Horovod's result in float64; integers are scaled before and after the reduction, each
    time truncated toward zero (Average: the sum times post / size)."""
    integer = not tf.as_dtype(dtype).is_floating
    cut = np.trunc if integer else (lambda a: a)
    stack = np.stack([cut(rank_data(k, dtype).astype(np.float64) * pre) for k in range(n)])
    out = {"Sum": stack.sum(0), "Average": stack.sum(0) / n, "Min": stack.min(0),
           "Max": stack.max(0), "Product": stack.prod(0)}[op]
    return cut(out * post) if not (integer and op == "Average") else cut(stack.sum(0) * (post / n))


# allreduce: every dtype x op, eagerly and inside tf.function, with scales.
TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-6, "float64": 1e-12}
for mode, wrap in MODES.items():
    for dtype in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                  "int64", "uint8"):
        for op in ("Sum", "Average", "Min", "Max", "Product"):
            if dtype == "uint8" and op == "Average":
                continue  # the mean of unsigned values truncates: covered by the int types
            scales = (1.0, 1.0) if op in ("Min", "Max", "Product") else (0.5, 3.0)
            x = tf.constant(rank_data(r, dtype))
            fn = wrap(lambda t, op=op, s=scales: hvd.allreduce(
                t, op=getattr(hvd, op), prescale_factor=s[0], postscale_factor=s[1]))
            got = fn(x)
            check(f"{mode} {dtype} {op} dtype", got.dtype == x.dtype, str(got.dtype))
            check_close(f"{mode} {dtype} {op}", got.numpy().astype(np.float64),
                        reference(dtype, op, *scales), rtol=TOLERANCE.get(dtype, 0.0))

for mode, wrap in MODES.items():
    # grouped_allreduce: mixed dtypes in one call.
    fn = wrap(lambda a, b: hvd.grouped_allreduce([a, b], op=hvd.Sum))
    a, b = fn(tf.fill([5], float(r)), tf.fill([2, 2], np.float64(r + 1)))
    check_close(f"{mode} grouped a", a.numpy(), np.full(5, n * (n - 1) / 2))
    check_close(f"{mode} grouped b", b.numpy(), np.full((2, 2), n * (n + 1) / 2))
    # allgather: different first dimensions.
    got = wrap(lambda t: hvd.allgather(t))(tf.fill([r + 1, 2], float(r)))
    check_close(f"{mode} allgather", got.numpy(),
                np.concatenate([np.full((k + 1, 2), float(k)) for k in range(n)]))
    bools = wrap(lambda t: hvd.allgather(t))(tf.constant([r == 0, True]))
    check(f"{mode} allgather bool", bools.dtype == tf.bool and
          bools.numpy().tolist() == [True, True, False, True], str(bools))
    g1, g2 = wrap(lambda p, q: hvd.grouped_allgather([p, q]))(
        tf.constant([r], tf.int32), tf.fill([1, 3], float(r)))
    check_close(f"{mode} grouped_allgather", g1.numpy(), np.arange(n))
    check_close(f"{mode} grouped_allgather 2", g2.numpy(),
                np.repeat(np.arange(float(n)), 3).reshape(n, 3))
    # broadcast from the last rank.
    got = wrap(lambda t: hvd.broadcast(t, root_rank=n - 1))(tf.fill([3], tf.cast(r, tf.int8)))
    check_close(f"{mode} broadcast", got.numpy(), np.full(3, n - 1))
    # alltoall: rank r sends k+1 rows to rank k.
    rows = sum(range(1, n + 1))
    out, received = wrap(lambda t, s: hvd.alltoall(t, splits=s))(
        tf.fill([rows, 2], float(r)), tf.constant(list(range(1, n + 1)), tf.int32))
    check_close(f"{mode} alltoall", out.numpy(), np.repeat(np.arange(float(n)), r + 1)
                [:, None] * np.ones((1, 2)))
    check_close(f"{mode} alltoall splits", received.numpy(), np.full(n, r + 1))
    # Without splits: equal parts, and the rows alone (no received splits), as Horovod's.
    got = wrap(lambda t: hvd.alltoall(t))(tf.fill([2 * n], tf.cast(r, tf.uint8)))
    check_close(f"{mode} alltoall equal", got.numpy(), np.repeat(np.arange(n), 2))
    # reducescatter: 5 rows, the first rank gets 3.
    got = wrap(lambda t: hvd.reducescatter(t, op=hvd.Sum))(tf.fill([5, 2], float(r + 1)))
    mine = 3 if r == 0 else 2
    check_close(f"{mode} reducescatter", got.numpy(), np.full((mine, 2), n * (n + 1) / 2))
    # process sets: each rank alone in its own set.
    got = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=singles[r]))(
        tf.fill([2], float(r)))
    check_close(f"{mode} process set", got.numpy(), np.full(2, float(r)))
    # IndexedSlices: the values and indices of every rank.
    slices = tf.IndexedSlices(tf.fill([1, 3], float(r + 1)), tf.constant([r]),
                              tf.constant([n, 3]))
    got = wrap(lambda v, i: hvd.allreduce(tf.IndexedSlices(v, i, tf.constant([n, 3]))))(
        slices.values, slices.indices)
    check(f"{mode} sparse type", isinstance(got, tf.IndexedSlices), str(type(got)))
    check_close(f"{mode} sparse", tf.convert_to_tensor(got).numpy(),
                np.arange(1.0, n + 1)[:, None] * np.ones((1, 3)) / n)
    # fp16 compression keeps the caller's dtype.
    got = wrap(lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16))(
        tf.fill([4], float(r)))
    check(f"{mode} fp16 dtype", got.dtype == tf.float32, str(got.dtype))
    check_close(f"{mode} fp16", got.numpy(), np.full(4, (n - 1) / 2))

# Gradients, eagerly and inside tf.function.
for mode, wrap in MODES.items():
    def grads(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            summed = hvd.allreduce(x * (r + 1), op=hvd.Sum)
            gathered = hvd.allgather(x * 2.0)
            root = hvd.broadcast(x, root_rank=0)
            loss = tf.reduce_sum(summed) + tf.reduce_sum(gathered) + tf.reduce_sum(root)
        return tape.gradient(loss, x)
    got = wrap(grads)(tf.ones([3]))
    # d/dx: the allreduced ones (n) times r+1, + 2 (this rank's rows of the averaged
    # gradient), + 1 on the root only (the averaged gradient; zero elsewhere).
    want = n * (r + 1) + 2 + (1 if r == 0 else 0)
    check_close(f"{mode} gradients", got.numpy(), np.full(3, want))

    def scatter_grads(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            summed = hvd.reducescatter(x, op=hvd.Sum)
            averaged = hvd.reducescatter(x * 3.0, op=hvd.Average)
            loss = tf.reduce_sum(summed) + tf.reduce_sum(averaged)
        return tape.gradient(loss, x)
    got = wrap(scatter_grads)(tf.ones([2 * n, 2]))
    # Horovod's: the allgathered gradient, times the size for Sum (n), alone for Average (3).
    check_close(f"{mode} reducescatter gradients", got.numpy(), np.full((2 * n, 2), n + 3.0))

# Objects and variables.
check("broadcast_object", hvd.broadcast_object({"r": r}, root_rank=1) == {"r": 1})
check("allgather_object", hvd.allgather_object(r * 10) == [k * 10 for k in range(n)])
v = tf.Variable(tf.fill([2], float(r)))
for mode, wrap in (("eager", lambda f: f), ("function", tf.function)):
    u = tf.Variable(tf.fill([3], float(r + 5)))
    got = wrap(lambda: hvd.broadcast_([u], root_rank=n - 1, name=f"inplace.{mode}"))()
    check_close(f"{mode} broadcast_ value", got[0].numpy(), np.full(3, n + 4.0))
    check_close(f"{mode} broadcast_ variable", u.numpy(), np.full(3, n + 4.0))
hvd.broadcast_variables([v], root_rank=1)
check_close("broadcast_variables", v.numpy(), np.ones(2))
w = tf.Variable(tf.fill([2], float(r)))
tf.function(lambda: hvd.broadcast_variables([w], root_rank=0))()
check_close("broadcast_variables in tf.function", w.numpy(), np.zeros(2))
# The rank ops: read when they run, eagerly and inside tf.function.
for mode, wrap in MODES.items():
    numbers = wrap(lambda: [hvd.rank_op(), hvd.local_rank_op(), hvd.size_op(),
                            hvd.local_size_op()])()
    check(f"rank ops {mode}", [int(t) for t in numbers] ==
          [r, hvd.local_rank(), n, hvd.local_size()] and numbers[0].dtype == tf.int32)
check("join", hvd.join() in range(n))
hvd.shutdown()
print("tf ops OK", flush=True)
