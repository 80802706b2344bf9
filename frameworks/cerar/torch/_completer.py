"""A thread that completes torch futures in submission order (the DDP hook's and the
torch.distributed backend's), stopped before the interpreter finalizes.

Why a thread: futures' callbacks then never run on the runtime's coordinator thread, and
torch's threads never wait on the runtime. Why stopped at exit: completing a future runs its
callbacks inside torch's C++ code; a daemon thread still there when the interpreter finalizes
is ended by pthread_exit unwinding through C++ frames, and the process aborts ("terminate called
without an active exception") after the program has finished.
"""
import atexit
import queue
import threading
import weakref

_live = weakref.WeakSet()


class Completer:
    """submit(finish, future): runs finish() on the thread (in order) and sets its value, or
    error(exception) for an exception, on the future."""

    def __init__(self, name, error=lambda exception: exception):
        self._name = name
        self._error = error
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()
        _live.add(self)

    def submit(self, finish, future):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put((finish, future))

    def close(self, timeout=None):
        """Lets the thread finish what was submitted, then stops it (waiting up to timeout)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._queue.put(None)
        if thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            finish, future = item
            try:
                value = finish()
            except Exception as exception:  # noqa: BLE001 -- every failure goes to the future
                future.set_exception(self._error(exception))
            else:
                future.set_result(value)


@atexit.register
def _close_all():
    # atexit runs handlers last-registered first, so cerar's own shutdown (registered when
    # cerar was imported, before this module) has not run yet: stop the runtime first, so that
    # a handle no peer will complete fails now instead of holding its thread, then let every
    # thread finish its futures.
    import cerar
    cerar.shutdown()
    for completer in list(_live):
        completer.close(timeout=30)
