"""Per-tensor overhead of cerar.torch, layer by layer, this tree against an earlier one.

    python bench/per_tensor_overhead.py --before OTHER/frameworks [--np 4] [--rounds 3]
    python bench/per_tensor_overhead.py --metrics [--scrape-interval 0.1]

--metrics compares the installed cerar with its Prometheus metrics off ("before") and on
("after": CERAR_METRICS_PORT set, every rank scraped each --scrape-interval seconds by a thread
of this script; docs/metrics.md).

OTHER/frameworks is the `frameworks` folder of another checkout with its extension built in it
(cerar/_cerar*.so); this tree's own frameworks folder (with its extension) is the "after". Each
round runs one job of --np ranks on loopback (cerarrun, exact ring) per version, the two
versions alternating, and rank 0 reports medians of steps; the table gives, per figure, the
median over rounds of each version and after/before.

A step is 1000 tensors of 16 floats (or ResNet-50's 161 gradients) enqueued in backward order,
then synchronized. Per tensor, the layers of a tiny step:
  front end        allreduce_async_ + synchronize, less the same through the extension directly
  bindings: views  building the RawTensor views of the tensors (the bindings' input)
  bindings+queue   the extension's allreduce calls: conversion, argument checks, the queue
  negotiation ..   from the last call to the last handle done: negotiation, reduction and
                   completion (the coordinator's cycles; cycles per step are printed too)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TINY, TINY_ELEMENTS = 1000, 16


def _median_ms(fn, steps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def worker(tiny_steps, resnet_steps):
    """One rank: the figures of this version, printed by rank 0 as one JSON line."""
    sys.path.insert(0, HERE)
    import torch
    import cerar
    import cerar.torch as hvd
    from cerar._cerar import DType, RawTensor
    from resnet50_sizes import SHAPES
    hvd.init()
    torch.set_num_threads(1)
    runtime = cerar._rt()
    tiny = [torch.ones(TINY_ELEMENTS) for _ in range(TINY)][::-1]
    names = [f"tiny.{k}" for k in range(TINY)][::-1]
    grads = [torch.ones(*s) for s in SHAPES][::-1]
    grad_names = [f"resnet.{k}" for k in range(len(SHAPES))][::-1]

    def views():
        return [RawTensor(t, t.data_ptr(), DType.float32, [TINY_ELEMENTS]) for t in tiny]

    def torch_step(tensors, tensor_names):
        handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum)
                   for t, n in zip(tensors, tensor_names)]
        for h in handles:
            hvd.synchronize(h)

    def extension_step(split):
        start = time.perf_counter()
        handles = [runtime.allreduce(n, v, None, cerar.Sum) for n, v in zip(names, views())]
        split.append(time.perf_counter() - start)
        for h in handles:
            h.wait()

    figures = {"tiny_ms": _median_ms(lambda: torch_step(tiny, names), tiny_steps),
               "views_us": _median_ms(views, tiny_steps) * 1e3 / TINY}
    enqueue = []
    extension_ms = _median_ms(lambda: extension_step(enqueue), tiny_steps)
    cycles_before = cerar.stats()["cycles"]
    extension_step([])
    figures["cycles_per_step"] = cerar.stats()["cycles"] - cycles_before
    enqueue_ms = statistics.median(enqueue) * 1e3
    figures["front_end_us"] = (figures["tiny_ms"] - extension_ms) * 1e3 / TINY
    figures["bindings_queue_us"] = enqueue_ms * 1e3 / TINY - figures["views_us"]
    figures["negotiation_completion_us"] = (extension_ms - enqueue_ms) * 1e3 / TINY
    figures["resnet_ms"] = _median_ms(lambda: torch_step(grads, grad_names), resnet_steps)
    if hvd.rank() == 0:
        print("FIGURES " + json.dumps(figures), flush=True)
    hvd.shutdown()


ROWS = (("tiny_ms", "1000 tiny tensors, ms/step"),
        ("front_end_us", "  front end, us/tensor"),
        ("views_us", "  bindings: views, us/tensor"),
        ("bindings_queue_us", "  bindings+queue, us/tensor"),
        ("negotiation_completion_us", "  negotiation+completion, us/tensor"),
        ("cycles_per_step", "  coordinator cycles/step"),
        ("resnet_ms", "ResNet-50 gradients, ms/step"))


def _scrape_until(stop, ports, interval):
    """Reads every rank's /metrics each `interval` seconds until `stop` is set; the count."""
    import urllib.request
    scrapes = 0
    while not stop.wait(interval):
        for port in ports:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                scrapes += 1
            except OSError:
                pass  # the rank has not started serving yet, or has ended
    return scrapes


def run_job(frameworks, args, metrics_port=0):
    env = dict(os.environ, CERAR_LOG_LEVEL="error", OMP_NUM_THREADS="1", CERAR_ALGORITHM="ring")
    if frameworks:
        env["PYTHONPATH"] = frameworks
    command = [sys.executable, "-m", "cerar.run", "-np", str(args.np), sys.executable,
               os.path.abspath(__file__), "--worker", "--tiny-steps", str(args.tiny_steps),
               "--resnet-steps", str(args.resnet_steps)]
    scraper = None
    if metrics_port:
        import concurrent.futures
        import threading
        env["CERAR_METRICS_PORT"] = str(metrics_port)
        stop = threading.Event()
        scraper = concurrent.futures.ThreadPoolExecutor(1).submit(
            _scrape_until, stop, range(metrics_port, metrics_port + args.np),
            args.scrape_interval)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    finally:
        if scraper is not None:
            stop.set()
            print(f"  scrapes answered: {scraper.result()}", flush=True)
    found = re.search(r"FIGURES (\{.*\})", done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"job with {frameworks} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(found.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="frameworks folder of the version to compare with")
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny-steps", type=int, default=30)
    parser.add_argument("--resnet-steps", type=int, default=10)
    parser.add_argument("--metrics", action="store_true",
                        help="compare the installed cerar with metrics off and on")
    parser.add_argument("--metrics-port", type=int, default=29400,
                        help="--metrics: the ranks' CERAR_METRICS_PORT (default 29400)")
    parser.add_argument("--scrape-interval", type=float, default=0.1,
                        help="--metrics: seconds between scrapes of every rank (default 0.1)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.tiny_steps, args.resnet_steps)
    if args.metrics:
        versions = {"before": None, "after": None}
        ports = {"before": 0, "after": args.metrics_port}
    elif not args.before:
        parser.error("--before (or --metrics) is required")
    else:
        versions = {"before": os.path.abspath(args.before),
                    "after": os.path.join(os.path.dirname(HERE), "frameworks")}
        ports = {"before": 0, "after": 0}
    runs = {v: [] for v in versions}
    for round_ in range(args.rounds):
        for version, frameworks in versions.items():
            runs[version].append(run_job(frameworks, args, ports[version]))
            print(f"round {round_ + 1} {version}: tiny {runs[version][-1]['tiny_ms']:.1f} ms, "
                  f"resnet {runs[version][-1]['resnet_ms']:.1f} ms", flush=True)
    print(f"\n{args.np} ranks, loopback, exact ring; medians over {args.rounds} rounds "
          "(range)" + ("; before: metrics off, after: on and scraped" if args.metrics else ""))
    print(f"{'':38} {'before':>22} {'after':>22} {'after/before':>12}")
    for key, label in ROWS:
        cells = []
        for version in versions:
            values = [run[key] for run in runs[version]]
            cells.append((statistics.median(values), min(values), max(values)))
        ratio = cells[1][0] / cells[0][0] if cells[0][0] else float("nan")
        text = [f"{m:8.2f} ({lo:.2f}-{hi:.2f})" for m, lo, hi in cells]
        print(f"{label:38} {text[0]:>22} {text[1]:>22} {ratio:12.3f}")


if __name__ == "__main__":
    main()
