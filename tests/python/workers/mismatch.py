"""Ranks disagree on a tensor's shape: every rank must get MismatchError (a CerarError) naming a
rank that disagrees, and the job goes on."""
import numpy as np

import cerar
import cerar.numpy as cn
from common import check, check_close

cerar.init()
r, n = cerar.rank(), cerar.size()
try:
    cn.allreduce(np.ones(10 + r, np.float32), op=cerar.Sum, name="mismatched")
except cerar.CerarError as error:
    check("message", "mismatched" in str(error), f"the error does not name the tensor: {error}")
    check("class", isinstance(error, cerar.MismatchError), f"{type(error).__name__}: {error}")
    check("peer", error.peer in range(n), f"peer {error.peer!r}: {error}")
    print(f"CerarError: {error}", flush=True)
else:
    check("mismatch", False, "no CerarError for tensors of different shapes")
try:
    dtype = np.float32 if r % 2 == 0 else np.float64
    cn.allreduce(np.ones(10, dtype), op=cerar.Sum, name="dtypes")
except cerar.MismatchError as error:
    print(f"CerarError dtype: {error}", flush=True)
else:
    check("dtype mismatch", False, "no CerarError for tensors of different dtypes")
# the runtime is still usable afterwards
check_close("after errors", cn.allreduce(np.ones(4, np.float32), op=cerar.Sum, name="ok"),
            np.full(4, float(n)))
cerar.shutdown()
print("mismatch OK", flush=True)
