"""DistributedGradientTape: a tf.GradientTape whose gradient() averages the gradients across
ranks, as Horovod's. The dense gradients go as one fused grouped all-reduce (one per group with
num_groups/groups), which inside tf.function is a single Python op per group; tf.IndexedSlices
are allgathered (or densified with sparse_as_dense)."""
import tensorflow as tf

from cerar import Adasum, Average, Sum
from cerar._cerar import InvalidArgumentError
from cerar._frontend import auto_name
from cerar._keras_optimizer import divided, local_weights
from cerar._process_sets import _membership, global_process_set
from cerar.tensorflow.compression import Compression
from cerar.tensorflow.ops import allreduce, grouped_allreduce


class GradientReducer:
    """How a list of gradients is reduced: Horovod's DistributedGradientTape and
    DistributedOptimizer arguments, shared by both."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise InvalidArgumentError("cerar.tensorflow: gradient_predivide_factor needs "
                                       "op=Average")
        if op not in (Average, Sum, Adasum):
            raise InvalidArgumentError(f"cerar.tensorflow: gradients reduce with Average, Sum "
                                       f"or Adasum, not {op!r}")
        if num_groups and groups is not None:
            raise InvalidArgumentError("cerar.tensorflow: pass num_groups or groups, not both")
        self.compression, self.sparse_as_dense, self.op = compression, sparse_as_dense, op
        self.prescale = 1.0 / gradient_predivide_factor
        self.postscale = float(gradient_predivide_factor)
        self.num_groups, self.groups = int(num_groups or 0), groups
        self.process_set, self.scale_local = process_set, scale_local_gradients
        self.local_sources = set()

    def _group_of(self, variables):
        """Each gradient's group: index lists, in a fixed order."""
        count = len(variables)
        if self.groups is not None:
            where = {}
            for g, members in enumerate(self.groups):
                for v in members:
                    where[id(v)] = g
            keyed = {}
            for i, v in enumerate(variables):
                keyed.setdefault(where.get(id(v), len(self.groups)), []).append(i)
            return [keyed[k] for k in sorted(keyed)]
        if self.num_groups > 1:
            step = -(-count // self.num_groups)
            return [list(range(s, min(s + step, count))) for s in range(0, count, step)]
        return [list(range(count))]

    def reduce(self, grads, variables):
        """The reduced gradients (None stays None), in order."""
        grads, variables = list(grads), list(variables)
        out = list(grads)
        base = auto_name("gradients")
        size = _membership(None if self.process_set is global_process_set
                           else self.process_set)[2]
        dense = []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                continue
            if v is not None and _ref(v) in self.local_sources:
                out[i] = divided(g, size) if self.scale_local else g
            elif isinstance(g, tf.IndexedSlices) and not self.sparse_as_dense:
                out[i] = allreduce(g, op=self.op, name=f"{base}.sparse.{i}",
                                   process_set=self.process_set)
            else:
                dense.append(i)
        for k, group in enumerate(self._group_of([variables[i] for i in dense])):
            members = [dense[j] for j in group]
            reduced = grouped_allreduce([tf.convert_to_tensor(grads[i]) for i in members],
                                        op=self.op, compression=self.compression,
                                        prescale_factor=self.prescale,
                                        postscale_factor=self.postscale, name=f"{base}.{k}",
                                        process_set=self.process_set)
            for i, r in zip(members, reduced):
                out[i] = r
        return out


def _ref(variable):
    return variable.ref() if hasattr(variable, "ref") else id(variable)


class _DistributedGradientTape(tf.GradientTape):
    """The user's tape, same state, with gradient() reducing across ranks."""

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat = self._cerar_reducer.reduce(tf.nest.flatten(grads), flat_sources)
        return tf.nest.pack_sequence_as(grads, flat)

    def register_local_source(self, source):
        """A variable of this rank only: its gradient is not reduced (scaled by 1/size when
        scale_local_gradients)."""
        self._cerar_reducer.local_sources.add(_ref(source))


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """`gradtape` (a tf.GradientTape, typically after its `with` block), whose gradient()
    returns the gradients averaged across ranks. device_dense/device_sparse are Horovod's,
    unused (tensors travel through host memory)."""
    tape = _DistributedGradientTape.__new__(_DistributedGradientTape)
    tape.__dict__.update(gradtape.__dict__)  # the same recording: TF keeps it in __dict__
    tape._cerar_reducer = GradientReducer(compression, sparse_as_dense, op,
                                          gradient_predivide_factor, num_groups, groups,
                                          process_set, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose gradients of `local_layers`' trainable weights (Keras
    layers: this rank's own) are not reduced, as Horovod's (scaled by 1/size when
    scale_local_gradients)."""
    local = local_weights(local_layers, tf.keras.layers.Layer, "tf.keras.layers.Layer")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for variable in local:
        tape.register_local_source(variable)
    return tape
