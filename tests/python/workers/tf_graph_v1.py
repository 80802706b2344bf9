"""cerar.tensorflow in TF1 graphs run by sessions: many independent collectives fetched in one
run, with fewer inter-op threads than collectives, complete on every rank with exact sums (a
session may start them in any order; the ops follow their creation order); the global
variables' broadcast and its hook; a tf.compat.v1.train optimizer's training equals one
process's over the whole batch."""
import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()
COUNT = 16

graph = tf.Graph()
with graph.as_default():
    inputs = [tf.constant(np.full([3 + i], float(r + i), np.float32)) for i in range(COUNT)]
    sums = [hvd.allreduce(t, op=hvd.Sum, name=f"v1.sum.{i}") for i, t in enumerate(inputs)]
    gathered = hvd.allgather(tf.constant(np.full([1 + r, 2], float(r), np.float32)),
                             name="v1.gather")
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2,
                                      intra_op_parallelism_threads=1)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        for step in range(3):
            values, rows = session.run([sums, gathered])
            for i, value in enumerate(values):
                expected = sum(float(k + i) for k in range(n))
                check_close(f"step {step} sum {i}", value, np.full([3 + i], expected))
            check("gather rows", rows.shape == (sum(1 + k for k in range(n)), 2), rows.shape)
        # A run that fetches one collective alone runs the ones created before it too.
        check_close("one fetched", session.run(sums[5]), np.full([8], float(sum(k + 5
                                                                             for k in range(n)))))

# broadcast_ (in place) on a reference and a resource variable: fetching its values runs the
# broadcast, the variables then hold the root's values; fetched twice, it runs twice alike.
with tf.Graph().as_default():
    from tensorflow.python.ops.ref_variable import RefVariable
    for kind, make in (("ref", RefVariable), ("resource", tf.compat.v1.Variable)):
        variable = make(tf.fill([4], float(r + 1)))
        values = hvd.broadcast_([variable], root_rank=n - 1, name=f"inplace.{kind}")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer([variable]))
            check_close(f"broadcast_ {kind} before", session.run(variable), np.full(4, r + 1.0))
            for run in range(2):
                check_close(f"broadcast_ {kind} value {run}", session.run(values[0]),
                            np.full(4, float(n)))
                check_close(f"broadcast_ {kind} variable {run}", session.run(variable),
                            np.full(4, float(n)))

# A graph grown between runs, each run (a new session, one thread) fetching every collective
# made so far, each its own segment, through slices of their results: nothing orders them, and
# ranks start them in different orders. A collective holds no thread while it waits
# (CerarWait), so every rank goes on.
with tf.Graph().as_default():
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1)
    tests = []
    for k in range(8):
        gathered = hvd.allgather(tf.ones([3] * (1 + k % 3)) * r, name=f"grown.{k}")
        for i in range(n):
            piece = tf.slice(gathered, [i * 3] + [0] * (k % 3), [3] + [-1] * (k % 3))
            tests.append(tf.reduce_all(tf.equal(piece, float(i))))
        with tf.compat.v1.Session(config=config) as session:
            check(f"grown graph run {k}", session.run(tf.reduce_all(tests)))

# The hook broadcasts rank 0's initial values in a MonitoredTrainingSession.
with tf.Graph().as_default():
    weight = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0 + r, 2.0 * r]))
    hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
        check_close("hook broadcast", session.run(weight), np.array([1.0, 0.0]))
try:  # eagerly there is no collection of global variables
    hvd.broadcast_global_variables(0)
except hvd.InvalidArgumentError as error:  # and Horovod's RuntimeError
    check("eager global variables", "broadcast_variables" in str(error)
          and isinstance(error, RuntimeError) and hvd.util._executing_eagerly(), str(error))
else:
    check("eager global variables", False, "no error eagerly")

# Linear regression with a TF1 optimizer: each rank its half of the batch, gradients averaged.
rows = np.random.default_rng(3).standard_normal((8, 3)).astype(np.float32)
targets = rows @ np.array([1.0, -2.0, 0.5], np.float32)


def train(x, y, optimizer_of):
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.zeros([3]))
        loss = tf.reduce_mean((tf.linalg.matvec(tf.constant(x), w) - tf.constant(y)) ** 2)
        step = optimizer_of(tf.compat.v1.train.MomentumOptimizer(0.05, 0.9)).minimize(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(5):
                session.run(step)
            return session.run(w)


half = slice(r * 8 // n, (r + 1) * 8 // n)
mine = train(rows[half], targets[half], hvd.DistributedOptimizer)
whole = train(rows, targets, lambda optimizer: optimizer)
check_close("v1 optimizer", mine, whole, rtol=1e-5)
print("tf graph v1 OK", flush=True)
hvd.shutdown()
