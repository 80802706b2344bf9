"""A failed collective inside a compiled step reaches Python as the backend's error (TensorFlow's
tf.errors.OpError, JAX's JaxRuntimeError) whose message carries the cerar error's class and
text; here it becomes that cerar class again, so that fit() fails with the classes cerar.torch
raises (MismatchError, PeerLostError, ...) and cerar.keras.elastic can tell a lost peer from a
bug in the program."""
import functools
import re

import cerar
from cerar._cerar import CerarError

# Most specific first: a message may name a base class too.
_CLASSES = [getattr(cerar, name) for name in ("PeerLostError", "CerarTimeoutError",
                                              "MismatchError", "ShutDownError",
                                              "InvalidArgumentError", "InternalError",
                                              "CerarError")]
_PATTERN = re.compile(r"\b(%s): ?(.*)" % "|".join(c.__name__ for c in _CLASSES))


def translate(error):
    """The cerar error that `error` carries, or None."""
    if isinstance(error, CerarError):
        return error
    found = _PATTERN.search(str(error))
    if found is None:
        return None
    cls = next(c for c in _CLASSES if c.__name__ == found.group(1))
    return cls(found.group(2).strip() or str(error))


def translating(function, after=None):
    """`function`, raising its backend errors as their cerar classes; `after()` runs after each
    call (JAX: the jitted step's collectives have run, so their errors surface here)."""
    if getattr(function, "_cerar_translating", False):
        return function

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            out = function(*args, **kwargs)
            if after is not None:
                after()
            return out
        except CerarError:
            raise
        except Exception as error:  # noqa: B902 (anything else propagates unchanged)
            cerar_error = translate(error)
            if cerar_error is None:
                raise
            raise cerar_error from error
    call._cerar_translating = True
    return call


def install(model):
    """The model's step functions (made by fit before on_train_begin) raising cerar errors."""
    from cerar.keras import _backend
    for attribute in ("train_function", "test_function"):
        function = getattr(model, attribute, None)
        if function is not None:
            setattr(model, attribute, translating(function, _backend.wait))
