"""cerar.tensorflow's errors: shapes that differ across ranks fail on every rank, eagerly with
MismatchError and inside tf.function with TensorFlow's op error naming it; jit_compile is
refused at trace time, naming the option; what a tf.IndexedSlices cannot take is refused as
Horovod refuses it; and the runtime goes on afterwards."""
import numpy as np
import tensorflow as tf

import cerar.tensorflow as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()

try:
    hvd.allreduce(tf.ones([10 + r]), op=hvd.Sum, name="eager.mismatch")
except hvd.MismatchError as error:
    check("eager message", "eager.mismatch" in str(error), str(error))
else:
    check("eager mismatch", False, "no MismatchError for shapes that differ")

try:
    tf.function(lambda t: hvd.allreduce(t, name="graph.mismatch"))(tf.ones([4, 1 + r]))
except tf.errors.OpError as error:
    check("graph message", "MismatchError" in error.message and "graph.mismatch" in
          error.message, error.message)
else:
    check("graph mismatch", False, "no error for shapes that differ inside tf.function")

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
