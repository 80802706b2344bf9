"""One rank of the wheel's check (scripts/wheel-env.sh): an all-reduce through the installed
wheel with cerar.numpy, and with cerar.torch where torch is present; exits non-zero on a wrong
sum or when cerar was imported from anywhere but the venv under test.

Usage: cerarrun -np 2 python tests/wheel/rank_check.py VENV EXPECT_NCCL
  EXPECT_NCCL: "none" (CUDA libraries hidden: NCCL must not load, with the install hint),
               "any" (some libnccl.so.2 loads), or a folder the loaded one must be under.
"""
import os
import sys

import numpy as np

import cerar
import cerar.numpy as hnp

venv, expect_nccl = os.path.realpath(sys.argv[1]), sys.argv[2]
where = os.path.realpath(cerar.__file__)
assert where.startswith(venv + os.sep), f"cerar imported from {where}, not from {venv}"

hnp.init()
rank, size = hnp.rank(), hnp.size()
x = np.arange(1, 4097, dtype=np.float32) * (rank + 1)
total = hnp.allreduce(x, op=hnp.Sum, name="wheel.numpy")
expected = np.arange(1, 4097, dtype=np.float64) * (size * (size + 1) / 2)
assert np.array_equal(total.astype(np.float64), expected), f"rank {rank}: wrong numpy sum"
report = [f"numpy sum exact ({size} ranks)"]

version, nccl = cerar._cerar.nccl_version()
if expect_nccl == "none":
    assert version == 0 and "pip install nvidia-nccl" in nccl, (version, nccl)
    report.append("NCCL hidden: not loaded, with the install hint")
else:
    assert version > 0, f"no NCCL loaded: {nccl}"
    if expect_nccl != "any":
        assert os.path.realpath(nccl).startswith(os.path.realpath(expect_nccl)), nccl
    report.append(f"NCCL {version} from {nccl}")

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    import cerar.torch as hvd
    t = torch.arange(1, 1025, dtype=torch.float32) * (rank + 1)
    summed = hvd.allreduce(t, op=hvd.Sum, name="wheel.torch")
    assert torch.equal(summed, torch.arange(1, 1025, dtype=torch.float32) * (size * (size + 1) / 2))
    report.append(f"torch {torch.__version__} sum exact")
if rank == 0:
    print("wheel check: " + "; ".join(report), flush=True)
hnp.shutdown()
