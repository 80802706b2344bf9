"""Without CERAR_DYNAMIC_PROCESS_SETS only init's sets exist; changes raise ValueError."""
import numpy as np

import cerar
import cerar.numpy as cn
from common import check, fail

first, copy, everyone = cerar.ProcessSet([0]), cerar.ProcessSet([0]), cerar.ProcessSet([1, 0])
cerar.init(process_sets=[first, copy, everyone])
r = cerar.rank()
check("registered", first.process_set_id == 1 and first.size() == 1, str(first))
# As Horovod's init: a repeated set (the global one included) is invalidated.
check("a copy is invalidated", copy.process_set_id is None, str(copy))
check("the global set's ranks", everyone.process_set_id is None, str(everyone))
pair = first
for change in (lambda: cerar.add_process_set([1]), lambda: cerar.remove_process_set(pair)):
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
