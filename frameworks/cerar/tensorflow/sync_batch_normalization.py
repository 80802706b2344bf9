"""SyncBatchNormalization: Keras 3's BatchNormalization whose training-time batch statistics
are those of the global batch (every rank's samples), as Horovod's.

Only the moments change: each rank sums its samples, their squares and their count (with the
mask's weights, if any), one grouped all-reduce adds them across ranks, and the mean and the
(biased) variance follow. allreduce's gradient carries the gradient back to every rank's
inputs. Inference and the moving statistics are Keras's own.
"""
import keras
import tensorflow as tf

from cerar import Sum
from cerar._cerar import InvalidArgumentError
from cerar._process_sets import global_process_set
from cerar.tensorflow.ops import grouped_allreduce


@keras.saving.register_keras_serializable(package="cerar")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with global batch statistics (process_set: among its
    ranks only; not saved in the config: the default set is used when loaded)."""

    def __init__(self, *args, process_set=global_process_set, fused=None, **kwargs):
        # fused: Keras 2's, which Horovod's layer passes on and Keras 3 no longer takes.
        if fused:
            raise InvalidArgumentError("cerar.tensorflow.SyncBatchNormalization: fused=True is "
                                       "not supported (Keras 3 has no fused kernel)")
        super().__init__(*args, **kwargs)
        self._cerar_process_set = process_set

    def _moments(self, inputs, mask):
        axes = self._reduction_axes
        if mask is None:
            weights = tf.ones_like(inputs[..., :1])
        else:
            weights = tf.cast(tf.expand_dims(mask, -1), inputs.dtype)
        weights = tf.broadcast_to(weights, tf.shape(inputs))
        total, squares, count = grouped_allreduce(
            [tf.reduce_sum(inputs * weights, axes), tf.reduce_sum(tf.square(inputs) * weights,
                                                                  axes),
             tf.reduce_sum(weights, axes)],
            op=Sum, process_set=self._cerar_process_set)
        count = tf.maximum(count, 1.0)
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance
