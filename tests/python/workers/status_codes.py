"""One process: every status code reaches Python as its CerarError subclass, through the
runtime where one rank can cause it (bad arguments, shut down) and else through the
translation helper; `except RuntimeError` catches each."""
import numpy as np

import cerar
import cerar.numpy as cn
import cerar.torch
from cerar import _cerar
from common import check

EXPECTED = {1: cerar.CerarTimeoutError, 2: cerar.PeerLostError, 3: cerar.MismatchError,
            4: cerar.ShutDownError, 5: cerar.InvalidArgumentError, 6: cerar.InternalError}
NAMES = {1: "timeout", 2: "peer_lost", 3: "mismatch", 4: "shut_down", 5: "invalid_argument",
         6: "internal"}
for code, cls in EXPECTED.items():
    try:
        _cerar._raise_status(code, 3, f"code {code}")
    except RuntimeError as error:
        check(f"class of {code}", type(error) is cls, type(error).__name__)
        check(f"base of {code}", isinstance(error, cerar.CerarError), type(error).__name__)
        check(f"horovod {code}", isinstance(error, cerar.torch.HorovodInternalError), "")
        check(f"peer of {code}", error.peer == 3 and str(error) == f"code {code}", repr(error))
        check(f"name of {code}", error.code == NAMES[code], repr(error.code))
check("value error", issubclass(cerar.InvalidArgumentError, ValueError), "")

cerar.init()
try:
    cn.allreduce(np.ones(4, np.int32), op=cerar.Average, name="int average")
    check("invalid", False, "no error for an average of integers")
except RuntimeError as error:
    check("invalid class", type(error) is cerar.InvalidArgumentError, repr(error))
    check("invalid peer", error.peer is None, repr(error))

runtime = cerar._rt()
cerar.shutdown()
try:
    runtime.allreduce("late", np.ones(4, np.float32)).wait()
    check("shut down", False, "no error after shutdown")
except RuntimeError as error:
    check("shut down class", type(error) is cerar.ShutDownError, repr(error))
print("codes OK", flush=True)
