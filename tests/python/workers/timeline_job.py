"""A rank of a Horovod job script with timelines: HOROVOD_TIMELINE from init (rank 0 reads it
back while the job runs), then the one hvd.start_timeline(argv[1]) begins (it ends the first),
closed by hvd.stop_timeline()."""
import json
import os
import sys
import time

import torch

import cerar.torch as hvd

ODD = 'grad."odd"\\name\t\x01'  # a name the file's JSON must escape (test_timeline.py)
hvd.init()
hvd.allreduce(torch.ones(8), name="grad.w")
if hvd.rank() == 0:
    time.sleep(0.3)  # past the timeline's flush interval: the file on disk is a JSON array
    events = json.load(open(os.environ["HOROVOD_TIMELINE"]))
    print(f"[0] while running: {len(events)} events", flush=True)
hvd.start_timeline(sys.argv[1], mark_cycles=False)
hvd.allreduce(torch.ones(8), name="grad.v")
hvd.allreduce(torch.ones(8), name=ODD)
hvd.stop_timeline()
print(f"[{hvd.rank()}] done", flush=True)
hvd.shutdown()
