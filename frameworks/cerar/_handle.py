"""The Python handle of an asynchronous operation, shared by the framework modules."""


class Handle:
    """One asynchronous operation; ``synchronize(handle)`` (or ``handle.wait()``) returns its
    result. It keeps the tensors it uses alive until the operation ends."""

    __slots__ = ("_handle", "_finish", "_done", "_result", "__weakref__")

    def __init__(self, handle, finish=None, result=None):
        """finish(handle) gives the result once the operation is done; without it the result
        is `result` (an in-place operation's own tensor, known at the call)."""
        self._handle = handle
        self._finish = finish
        self._done = False
        self._result = result

    def poll(self):
        """True once the operation has ended (successfully or not)."""
        return self._done or self._handle.poll()

    def wait(self):
        """Waits for the operation and returns its result; raises CerarError if it failed."""
        if not self._done:
            self._handle.wait()
            if self._finish is not None:
                self._result = self._finish(self._handle)
                self._finish = None
            self._done = True
        return self._result


def poll(handle):
    return handle.poll()


def synchronize(handle):
    return handle.wait()
