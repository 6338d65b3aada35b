"""``python -m benchmarks.idle``: a model's first run after an idle spell, with the pool's
threads pinned to CPUs and not.

An idle server's next request, or a command that classifies one image, meets the engine
after its threads have gone to sleep. Each model and ``pin`` setting is loaded in a fresh
process, warmed up, and then, round after round, left idle for ``--gap`` seconds before two
runs are timed: the first after the idle spell, and the next one. The table gives the
medians over the rounds.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from pathlib import Path

from benchmarks.engines import pnnx_file
from benchmarks.models import MODELS

PINS = ("auto", "never")


def first_and_next(param: Path, inputs: list, pin: str, threads: int, gap: float,
                   rounds: int) -> tuple[float, float]:
    """Median seconds of the first run after ``gap`` seconds idle and of the run after it."""
    import kuiperinfer

    graph = kuiperinfer.load(param, threads=threads, pin=pin)
    for _ in range(5):
        graph.run(*inputs)
    first, after = [], []
    for _ in range(rounds):
        time.sleep(gap)
        for taken in (first, after):
            start = time.perf_counter()
            graph.run(*inputs)
            taken.append(time.perf_counter() - start)
    return statistics.median(first), statistics.median(after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenetv3,efficientnet_lite0,resnet18", help="comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gap", type=float, default=0.15, help="seconds idle before each timed pair (default 0.15)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--cache", type=Path, default=Path("bench-results/cache"), help="exported models")
    args = parser.parse_args(argv)
    print(f"| model | pin | first run after {args.gap * 1e3:.0f} ms idle, ms | next run, ms |")
    print("|---|---|---:|---:|")
    context = multiprocessing.get_context("spawn")
    for name in args.models.split(","):
        param, inputs = pnnx_file(MODELS[name], args.cache), list(MODELS[name].sample_inputs(1).values())
        for pin in PINS:
            with context.Pool(1) as pool:
                first, after = pool.apply(first_and_next, (param, inputs, pin, args.threads, args.gap, args.rounds))
            print(f"| {name} | {pin} | {first * 1e3:.2f} | {after * 1e3:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
