"""A rank of a Horovod job script with timelines: HOROVOD_TIMELINE from init, then the one
hvd.start_timeline(argv[1]) begins (it ends the first), closed by hvd.stop_timeline()."""
import sys

import torch

import cerar.torch as hvd

hvd.init()
hvd.allreduce(torch.ones(8), name="grad.w")
hvd.start_timeline(sys.argv[1], mark_cycles=False)
hvd.allreduce(torch.ones(8), name="grad.v")
hvd.stop_timeline()
print(f"[{hvd.rank()}] done", flush=True)
hvd.shutdown()
