"""This process's runtime, held apart from the package so that every module of it can read the
runtime without importing `cerar` back (cerar.init() and cerar.shutdown() set it)."""
import threading

lock = threading.Lock()  # init() and shutdown() change `runtime` under it
runtime = None
exporter = None  # this rank's metrics server (cerar._metrics), while one runs


def current():
    """The running runtime; ValueError before init()."""
    running = runtime
    if running is None:
        raise ValueError("cerar has not been initialized; call cerar.init() first")
    return running
