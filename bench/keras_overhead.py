"""cerar.keras's cost in model.fit: the median step time of examples/keras_train.py on N ranks
(each with its shard of the global batch, gradients averaged through cerar inside Keras's train
step) against one rank fitting the whole global batch, and against the same N ranks without the
all-reduce (--no-reduce), whose difference is the all-reduce's share of the step.

    python bench/keras_overhead.py [--backends tensorflow jax] [-np 4] [--batch 64]

Runs in an environment with Keras and the backends (scripts/tf-env.sh's venv for tensorflow
and jax, scripts/torch2-env.sh's for torch). Every rank runs single-threaded (the machine's
cores are shared by the ranks); the jobs run one after another, --rounds times interleaved, and
each figure is the median over rounds. Prints one markdown row per backend.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "keras_train.py")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
              "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
              "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}


def step_ms(backend, ranks, batch, args, reduce=True):
    command = [sys.executable, "-m", "cerar.run", "-np", str(ranks), sys.executable, EXAMPLE,
               "--epochs", "2", "--steps", str(args.steps), "--batch-size", str(batch),
               "--hidden", str(args.hidden)] + ([] if reduce else ["--no-reduce"])
    env = {**os.environ, **ONE_THREAD, "KERAS_BACKEND": backend}
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if "RESULT " in line]
    if out.returncode != 0 or not lines:
        sys.exit(f"{backend} -np {ranks}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1].split("RESULT ", 1)[1])["step_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("-np", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--steps", type=int, default=30, help="per epoch (2 epochs, the "
                        "second timed)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"| backend | 1 rank, batch {args.np * args.batch} (ms) | {args.np} ranks, batch "
          f"{args.batch} each (ms) | {args.np} ranks, no all-reduce (ms) | all-reduce share |")
    print("|---|---|---|---|---|")
    for backend in args.backends:
        runs = {"one": [], "reduced": [], "alone": []}
        for _ in range(args.rounds):
            runs["one"].append(step_ms(backend, 1, args.np * args.batch, args, reduce=False))
            runs["reduced"].append(step_ms(backend, args.np, args.batch, args))
            runs["alone"].append(step_ms(backend, args.np, args.batch, args, reduce=False))
        one, reduced, alone = (statistics.median(runs[k]) for k in ("one", "reduced", "alone"))
        share = max(0.0, reduced - alone) / reduced
        print(f"| {backend} | {one:.2f} | {reduced:.2f} | {alone:.2f} | {100 * share:.0f}% |",
              flush=True)


if __name__ == "__main__":
    main()
