"""The CerarStatus op (status_op.cc), built for the installed TensorFlow on first use.

Inside a graph a collective is a Python op, which TensorFlow fails with UnknownError (or
InvalidArgumentError) whatever the Python error was; Horovod's op kernels fail with
FailedPreconditionError for a mismatch, InvalidArgumentError for a bad argument, and so on.
CerarStatus, placed after the Python op, fails with the code the cerar error maps to.

It is compiled, not shipped: a TensorFlow release may change the kernel ABI, so a library
built for one release can fail to load in another. The first graph that needs it compiles
status_op.cc with the C++ compiler on PATH (`$CXX`, else `c++` or `g++`) and the installed
TensorFlow's flags (tf.sysconfig) into the user's cache, about 20 s, once per TensorFlow
version and source (the ranks of one host compile once, under a file lock). Without a
compiler, or when the build or the load fails, collectives in graphs fail as Python ops do
(UnknownError, the cerar message in it): a warning says why, once, and nothing else changes.
"""
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading

import tensorflow as tf

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "status_op.cc")
_log = logging.getLogger("cerar.tensorflow")
_lock = threading.Lock()
_state = {}  # "library": the loaded module or None, once decided


def _compiler():
    for name in (os.environ.get("CXX"), "c++", "g++"):
        path = name and shutil.which(name)
        if path:
            return path
    return None


def cache_folder():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cerar", "tf-status-op")


def _key(compiler, compile_flags, link_flags):
    digest = hashlib.sha256()
    with open(SOURCE, "rb") as source:
        digest.update(source.read())
    for part in (tf.__version__, compiler, *compile_flags, *link_flags):
        digest.update(part.encode() + b"\0")
    return f"tf{tf.__version__}-{digest.hexdigest()[:16]}"


def _build(compiler, compile_flags, link_flags, target):
    """Compiles into a temporary file beside `target`, then renames it there: a reader never
    sees half a library. Returns the compiler's complaint, or None."""
    folder = os.path.dirname(target)
    fd, partial = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    # -w: TensorFlow's headers warn of their own deprecations; the complaint is the errors.
    command = [compiler, "-shared", "-fPIC", "-O2", "-w", *compile_flags, SOURCE, "-o", partial,
               *link_flags]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return done.stderr.strip()[-2000:] or f"exit status {done.returncode}"
        os.replace(partial, target)
        return None
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _load():
    compiler = _compiler()
    if compiler is None:
        return None, ("no C++ compiler on PATH (set CXX): collectives inside graphs fail with "
                      "tf.errors.UnknownError instead of Horovod's error classes")
    compile_flags = list(tf.sysconfig.get_compile_flags())
    link_flags = list(tf.sysconfig.get_link_flags())
    folder = cache_folder()
    os.makedirs(folder, exist_ok=True)
    key = _key(compiler, compile_flags, link_flags)
    target = os.path.join(folder, key + ".so")
    with open(os.path.join(folder, key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one rank of a host compiles, the others wait
        if not os.path.exists(target):
            _log.info("cerar.tensorflow: compiling %s for TensorFlow %s (once)", SOURCE,
                      tf.__version__)
            complaint = _build(compiler, compile_flags, link_flags, target)
            if complaint is not None:
                return None, (f"compiling {SOURCE} against TensorFlow {tf.__version__} "
                              f"failed: {complaint}")
    try:
        return tf.load_op_library(target), None
    except Exception as error:  # noqa: BLE001 - any failure to load means: do without
        return None, f"loading {target} failed: {error}"


@tf.autograph.experimental.do_not_convert  # called while tracing; plain Python, not graph code
def library():
    """The loaded op library (its `cerar_status`), or None where it cannot be had."""
    with _lock:
        if "library" not in _state:
            try:
                _state["library"], why = _load()
            except OSError as error:  # an unwritable cache, a lock that cannot be taken
                _state["library"], why = None, str(error)
            if why is not None:
                _log.warning("cerar.tensorflow: %s", why)
        return _state["library"]
