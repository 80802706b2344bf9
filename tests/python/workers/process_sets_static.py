"""Without CERAR_DYNAMIC_PROCESS_SETS only init's sets exist; changes raise ValueError."""
import numpy as np

import cerar
import cerar.numpy as cn
from common import check, fail

pair = cerar.ProcessSet([0, 1])
copy = cerar.ProcessSet([1, 0])
cerar.init(process_sets=[pair, copy])
r = cerar.rank()
check("a set of every rank is the global one", pair.process_set_id == 0, str(pair))
check("a copy is invalidated", copy.process_set_id is None, str(copy))
for change in (lambda: cerar.add_process_set([0]), lambda: cerar.remove_process_set(pair)):
    try:
        change()
        fail("a process set changed without the dynamic switch")
    except ValueError as e:
        check("message", "CERAR_DYNAMIC_PROCESS_SETS" in str(e), str(e))
try:
    cn.allreduce(np.ones(2), process_set=cerar.ProcessSet([0]))
    fail("an unregistered set ran an operation")
except ValueError as e:
    check("unregistered", "not registered" in str(e), str(e))
print(f"[{r}] static only OK", flush=True)
cerar.shutdown()
