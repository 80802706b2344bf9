"""Keras variables across ranks, the same way on every backend: their values go through
cerar.numpy (host memory), outside any compiled step, and are assigned back with
Variable.assign. Used by the callbacks and the elastic state between steps."""
import keras
import numpy as np

import cerar
import cerar.numpy as cn
from cerar import _keras_optimizer
from cerar._process_sets import global_process_set, set_argument as _set


def broadcast_variables(variables, root_rank=0, name="keras.broadcast_variables",
                        process_set=global_process_set):
    """Assigns root_rank's values to `variables` (the same list, in the same order, on every
    rank of the set)."""
    variables = list(variables)
    arrays = [np.array(keras.ops.convert_to_numpy(v), order="C", copy=True, ndmin=1)
              for v in variables]
    handles = [cn.broadcast_async_(a, int(root_rank), f"{name}.{i}", _set(process_set))
               for i, a in enumerate(arrays)]
    for variable, array, handle in zip(variables, arrays, handles):
        handle.wait()
        variable.assign(array.reshape(variable.shape))


def model_variables(model, optimizer=None):
    """A model's variables and its optimizer's (built first if the model is built and the
    optimizer is not, so that every rank has them), in a fixed order."""
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    variables = list(model.variables)
    if optimizer is not None:
        if not optimizer.built and model.built:
            optimizer.build(model.trainable_variables)
        variables += list(optimizer.variables)
    return variables


def broadcast_global_variables(root_rank, model, process_set=global_process_set):
    """root_rank's model and optimizer state on every rank. Keras 3 keeps no collection of
    global variables, so the model names them: its variables and its optimizer's."""
    if model is None or not hasattr(model, "variables"):
        raise cerar.InvalidArgumentError("cerar.keras.broadcast_global_variables(root_rank, "
                                         "model): Keras 3 has no global variables; pass the "
                                         "model whose variables (and optimizer's) to send")
    broadcast_variables(model_variables(model), root_rank, "keras.global_variables",
                        process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None,
               **kwargs):
    """keras.models.load_model, whose compiled optimizer (with its loaded state) then reduces
    its gradients as DistributedOptimizer's do. custom_optimizers: optimizer classes the file
    names, added to custom_objects."""
    from cerar import keras as hvd
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects, **kwargs)
    if getattr(model, "optimizer", None) is not None:
        reducer = hvd._backend.make_reducer(compression or hvd.Compression.none, hvd.Average,
                                            1.0, global_process_set)
        _keras_optimizer.wrap_in_place(model.optimizer, reducer, "cerar.keras.load_model")
    return model
