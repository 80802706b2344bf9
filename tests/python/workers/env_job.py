"""A rank started without cerarrun: init() reads the launcher's variables."""
import numpy as np

import cerar
import cerar.numpy as cn
from common import check_close

cerar.init()
r, n = cerar.rank(), cerar.size()
check_close("sum", cn.allreduce(np.full(5, float(r)), op=cerar.Sum, name="x"),
            np.full(5, n * (n - 1) / 2))
cerar.shutdown()
print(f"env OK {r}/{n}", flush=True)
