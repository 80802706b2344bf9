"""cerar.tensorflow's errors: shapes that differ across ranks fail on every rank with Horovod's
class, tf.errors.FailedPreconditionError: eagerly an exception that is MismatchError too, inside
tf.function and a TF1 session TensorFlow's error naming it (through the CerarStatus op, compiled
here; with TF_STATUS_OP=off in the environment, the fallback without it: UnknownError);
jit_compile is
refused at trace time, naming the option; what a tf.IndexedSlices cannot take is refused as
Horovod refuses it; and the runtime goes on afterwards."""
import os

import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from cerar.tensorflow import status_op
from cerar.tensorflow._bridge import cerar_error_of
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()

if os.environ.get("TF_STATUS_OP") == "off":
    status_op._state["library"] = None  # as where no compiler is found
GRAPH_CLASS = (tf.errors.UnknownError if os.environ.get("TF_STATUS_OP") == "off"
               else tf.errors.FailedPreconditionError)

for kind in (hvd.MismatchError, tf.errors.FailedPreconditionError):
    try:
        hvd.allreduce(tf.ones([10 + r]), op=hvd.Sum, name=f"eager.mismatch.{kind.__name__}")
    except kind as error:
        check("eager message", "eager.mismatch" in str(error), str(error))
        check("eager class", isinstance(error, hvd.MismatchError)
              and isinstance(error, tf.errors.FailedPreconditionError), type(error).__mro__)
    else:
        check("eager mismatch", False, f"no {kind.__name__} for shapes that differ")

try:
    tf.function(lambda t: hvd.allreduce(t, name="graph.mismatch"))(tf.ones([4, 1 + r]))
except tf.errors.OpError as error:
    check("graph message", "MismatchError" in error.message and "graph.mismatch" in
          error.message, error.message)
    check("graph class", type(error) is GRAPH_CLASS, type(error))
    check("graph error's cerar error", isinstance(cerar_error_of(error), hvd.MismatchError),
          cerar_error_of(error))
else:
    check("graph mismatch", False, "no error for shapes that differ inside tf.function")

graph = tf.Graph()
with graph.as_default():
    fetched = hvd.allgather(tf.ones([2, 3 + r]), name="session.mismatch")
    with tf.compat.v1.Session() as session:
        try:
            session.run(fetched)
        except tf.errors.OpError as error:
            check("session class", type(error) is GRAPH_CLASS, type(error))
        else:
            check("session mismatch", False, "no error for shapes that differ in a session")

try:
    tf.function(lambda t: hvd.allreduce(t), jit_compile=True)(tf.ones([3]))
except hvd.InvalidArgumentError as error:
    check("jit message", "jit_compile" in str(error), str(error))
else:
    check("jit_compile", False, "a collective ran inside jit_compile=True")

try:
    hvd.allreduce(tf.ones([2]), op="Median")
except hvd.InvalidArgumentError as error:
    check("bad op", "Median" in str(error), str(error))

# What a tf.IndexedSlices cannot take: cerar's InvalidArgumentError, Horovod's
# NotImplementedError, before anything is sent.
slices = tf.IndexedSlices(tf.ones([1, 3]), tf.constant([r]), tf.constant([n, 3]))
for kwargs in ({"op": hvd.Min}, {"op": hvd.Sum, "prescale_factor": 0.5},
               {"op": hvd.Sum, "postscale_factor": 2.0}):
    for error_class in (hvd.InvalidArgumentError, NotImplementedError):
        try:
            hvd.allreduce(slices, **kwargs)
        except error_class as error:
            check(f"slices {kwargs}", "IndexedSlices" in str(error), str(error))
        else:
            check(f"slices {kwargs}", False, f"no {error_class.__name__}")

check_close("after errors", hvd.allreduce(tf.ones([4]), op=hvd.Sum).numpy(), np.full(4, n))
hvd.shutdown()
print("tf errors OK", flush=True)
