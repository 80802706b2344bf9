"""Functions that tests/python/test_ray.py runs on Ray actors (importing only numpy and
cerar, so that an actor loads them quickly)."""
import os
import time

import numpy as np


def allreduce_job(length):
    import cerar
    import cerar.numpy as cn
    cerar.init()
    mine = np.arange(length, dtype=np.float64) * (cerar.rank() + 1)
    total = cn.allreduce(mine, op=cerar.Sum, name="ray.sum")
    return cerar.rank(), cerar.size(), cerar.local_rank(), cerar.local_size(), total, os.getpid()


def failing_job(bad_rank):
    import cerar
    import cerar.numpy as cn
    cerar.init()
    if cerar.rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} refuses")
    # The others wait in a collective that the failed rank never joins.
    cn.allreduce(np.ones(4), op=cerar.Sum, name="never")
    return "unreachable"


def blocking_job(folder):
    """Says it has started (a file named by its pid in `folder`), then blocks."""
    with open(os.path.join(folder, str(os.getpid())), "w"):
        pass
    time.sleep(600)


def dying_job(bad_rank):
    """Rank bad_rank's process ends abruptly (as if killed) after the job has started."""
    import cerar
    cerar.init()
    if cerar.rank() == bad_rank:
        os._exit(3)
    time.sleep(600)


class Trainer:
    """An executable class: one instance per actor, for RayExecutor.execute."""

    def __init__(self, scale):
        self.scale = scale

    def scaled_rank(self):
        import cerar
        cerar.init()
        return self.scale * cerar.rank()
