"""Horovod's `horovod.tensorflow.util` helpers that scripts written for it call."""
import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow runs eagerly here (not in a TF1 graph or while tracing)."""
    return tf.executing_eagerly()
