"""``python -m benchmarks.matrix_rates``: the rates (GOP/s, 2*M*N*K per second) of the matrix
engine's products on the products of the benchmark zoo's layers.

Each network's convolutions (as im2col products: M output pixels, K = Cin*kh*kw, N = Cout;
depthwise and grouped ones are not products) and linear layers (M rows, K in, N out) are
found by running its PyTorch model (:mod:`benchmarks.models`) once at each batch size with
hooks on ``nn.Conv2d`` and ``nn.Linear``. Every distinct product is timed through each
kernel, bias and ReLU fused, alternating the kernels call by call, the median of a few
rounds taken; a network's rate is its products' operations over the sum of their times:

* ``fp32``: the float32 product the engine computes today, NumPy's matmul (BLAS, one thread
  per part) whole, or shared as im2col shares it (blocks of rows; of columns for few rows),
  then the compiled epilogue;
* ``fp32 tiles``: :class:`~kuiperinfer.kernels.matrix.products.Fp32Product`, the FMA register
  tiles of this CPU, its blocks shared through ``run_parts`` on 2 threads;
* ``int8 AMX-INT8``, ``int8 AVX512-VNNI``, ``int8 AVX2``:
  :class:`~kuiperinfer.kernels.matrix.products.Int8Product`, uint8 in, float32 out, through
  each kernel the CPU can run (on an AVX-512 CPU the AVX2 tiles use its 16-bit dot product:
  ``benchmarks.int8_avx2`` times them as AVX2 alone runs them);
* ``bf16``: :class:`~kuiperinfer.kernels.matrix.products.Bf16Product`, float32 in (rounded
  as it is read), float32 out, through each kernel the CPU can run (AMX-BF16, AVX512-BF16,
  or float32 products of the widened weights).

At 1 thread and at 2, sharing parts through a :class:`~kuiperinfer.kernels.parallel.ThreadPool`
as a graph's run does. On one thread the calls are timed by the CPU time of the calling thread
(what other processes take of the core is not counted), on two by the clock. Products run
alone here, so these are the kernels' rates, not a network's time. ``--shapes`` also prints
each product's rate in GMAC/s (multiply-adds, half the operations).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np

Shape = tuple[int, int, int]
"""(M, K, N) of a product."""
NETWORKS = ("resnet18", "mobilenetv3", "efficientnet_lite0", "yolov5s", "vit_tiny", "minilm")
PRECISIONS = ("fp32", "int8", "bf16")


def product_shapes(name: str, batch: int) -> Counter[Shape]:
    """The products of a zoo network's convolutions and linear layers at ``batch``, counted."""
    import torch

    from benchmarks.models import MODELS

    spec = MODELS[name]
    model = spec.build().eval()
    shapes: Counter[Shape] = Counter()

    def conv(module: torch.nn.Conv2d, inputs: tuple, output: torch.Tensor) -> None:
        if module.groups == 1:
            n, c_out, oh, ow = output.shape
            shapes[(n * oh * ow, module.in_channels * module.kernel_size[0] * module.kernel_size[1], c_out)] += 1

    def linear(module: torch.nn.Linear, inputs: tuple, output: torch.Tensor) -> None:
        shapes[(inputs[0].numel() // module.in_features, module.in_features, module.out_features)] += 1

    hooks = [module.register_forward_hook(conv if isinstance(module, torch.nn.Conv2d) else linear)
             for module in model.modules() if isinstance(module, torch.nn.Conv2d | torch.nn.Linear)]
    with torch.no_grad():
        model(*(torch.from_numpy(x) for x in spec.sample_inputs(batch).values()))
    for hook in hooks:
        hook.remove()
    return shapes


def kernels(m: int, k: int, n: int, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    """The call of each kernel this CPU runs on a product of this shape, bias and ReLU fused."""
    from kuiperinfer.kernels.compiled.activation import ActivationCode
    from kuiperinfer.kernels.compiled.epilogue import finish_rows
    from kuiperinfer.kernels.elementwise import InplaceActivation
    from kuiperinfer.kernels.im2col import FEW_PIXELS
    from kuiperinfer.kernels.matrix import products
    from kuiperinfer.kernels.parallel import run_parts, threads_for

    relu = InplaceActivation("relu")
    bias = rng.standard_normal(n).astype(np.float32)
    epilogue = products.ProductEpilogue(bias, relu)
    x = rng.standard_normal((m, k)).astype(np.float32)
    weight = rng.standard_normal((k, n)).astype(np.float32)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    code = ActivationCode.of(relu)

    def fp32() -> np.ndarray:
        """As im2col and nn.Linear share a product, into a new output as theirs (and every
        other kernel's here): one call on one thread; else blocks of rows, two per thread, or
        for few rows blocks of columns."""
        out = np.empty((m, n), np.float32)
        threads = threads_for(m * n * k)
        if threads == 1:
            np.matmul(x, weight, out=out)
            finish_rows(out, bias, *code)
            return out
        step = -(-n // threads) if m <= FEW_PIXELS else -(-m // (2 * threads))

        def block(start: int) -> None:
            if m <= FEW_PIXELS:
                np.matmul(x, weight[:, start:start + step], out=out[:, start:start + step])
                finish_rows(out[:, start:start + step], bias[start:start + step], *code)
            else:
                np.matmul(x[start:start + step], weight, out=out[start:start + step])
                finish_rows(out[start:start + step], bias, *code)
        run_parts(range(0, n if m <= FEW_PIXELS else m, step), m * n * k, block)
        return out

    calls: dict[str, Callable[[], object]] = {"fp32": fp32}
    tiles = products.Fp32Product(weight, epilogue)
    if tiles.kernel is not products.REFERENCE:
        calls[f"fp32 tiles ({tiles.kernel.name})"] = lambda: tiles(x)
    runnable = {products.AMX_INT8: (products.AMX_INT8, products.VNNI, products.AVX2),   # the chosen kernel and
                products.VNNI: (products.VNNI, products.AVX2), products.AVX2: (products.AVX2,),  # those below it
                products.REFERENCE: (), products.AMX_BF16: (products.AMX_BF16, products.AVX512_BF16)}
    for kernel in runnable[products.int8_kernel()]:
        product = products.Int8Product.from_float(weight, 0.02, 128, epilogue, kernel)
        calls[f"int8 {kernel.name}"] = lambda product=product: product(a)
    for kernel in runnable.get(products.bf16_kernel(), (products.bf16_kernel(),)):
        bf16 = products.Bf16Product(weight, epilogue, kernel)
        calls[f"bf16 ({kernel.name})"] = lambda bf16=bf16: bf16(x)
    return calls


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    from kuiperinfer.kernels.parallel import QuietMachine, ThreadPool, blas_threads

    if count == 1:
        with blas_threads(1):
            yield
        return
    pool = ThreadPool(count, spin="always", load=QuietMachine())
    try:
        with pool.running():
            yield
    finally:
        pool.close()


def time_shape(shape: Shape, threads: int, rounds: int, rng: np.random.Generator,
               precisions: tuple[str, ...] = PRECISIONS) -> dict[str, float]:
    """Seconds per call of each kernel of ``precisions`` on ``shape``: the median of ``rounds``
    rounds, the kernels alternating within each (each round a few calls, as many as fill 20 ms)."""
    calls = {name: call for name, call in kernels(*shape, rng).items() if name.split()[0] in precisions}
    clock = time.thread_time if threads == 1 else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in calls}
    with _threads(threads):
        for call in calls.values():
            call()
        repeats = {name: max(1, int(0.02 / max(_seconds(call, 1, time.perf_counter), 1e-6)))
                   for name, call in calls.items()}
        for _ in range(rounds):
            for name, call in calls.items():
                times[name].append(_seconds(call, repeats[name], clock))
    return {name: statistics.median(values) for name, values in times.items()}


def _seconds(call: Callable[[], object], repeats: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(repeats):
        call()
    return (clock() - start) / repeats


ShapeTimes = list[tuple[Shape, int, dict[str, float]]]
"""Per distinct product of a network: its shape, how many times the network computes it, and
each kernel's seconds per call."""


def network_times(name: str, batch: int, threads: int, rounds: int,
                  precisions: tuple[str, ...] = PRECISIONS) -> ShapeTimes:
    """Each kernel's time on each of a network's products at ``batch``."""
    rng = np.random.default_rng(0)
    return [(shape, count, time_shape(shape, threads, rounds, rng, precisions))
            for shape, count in product_shapes(name, batch).items()]


def network_rates(times: ShapeTimes) -> dict[str, float]:
    """GOP/s of each kernel over a network's products: their operations over the sum of their times."""
    operations = sum(2 * m * k * n * count for (m, k, n), count, _ in times)
    totals: dict[str, float] = {}
    for _, count, seconds in times:
        for kernel, value in seconds.items():
            totals[kernel] = totals.get(kernel, 0.0) + value * count
    return {kernel: operations / seconds / 1e9 for kernel, seconds in totals.items()}


def shape_table(rows: list[tuple[str, int, int, ShapeTimes]]) -> str:
    """A table: a row per product of each network, batch and threads, a column of GMAC/s per kernel."""
    names = list(dict.fromkeys(kernel for *_, times in rows for _, _, seconds in times for kernel in seconds))
    lines = ["| network | batch | threads | M x K x N | count | " + " | ".join(f"{name} GMAC/s" for name in names)
             + " |", "|---|---:|---:|---|---:|" + "---:|" * len(names)]
    for network, batch, threads, times in rows:
        for (m, k, n), count, seconds in times:
            cells = " | ".join(f"{m * k * n / seconds[name] / 1e9:.1f}" if name in seconds else "" for name in names)
            lines.append(f"| {network} | {batch} | {threads} | {m}x{k}x{n} | {count} | {cells} |")
    return "\n".join(lines) + "\n"


def markdown(rows: list[tuple[str, int, int, dict[str, float]]]) -> str:
    """A table: a row per network, batch and threads, a column of GOP/s per kernel."""
    names = list(dict.fromkeys(kernel for *_, rates in rows for kernel in rates))
    lines = ["| network | batch | threads | " + " | ".join(f"{name} GOP/s" for name in names) + " |",
             "|---|---:|---:|" + "---:|" * len(names)]
    for network, batch, threads, rates in rows:
        cells = " | ".join(f"{rates[name]:.0f}" if name in rates else "" for name in names)
        lines.append(f"| {network} | {batch} | {threads} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.matrix_rates", description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=NETWORKS)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS,
                        help="the kernels timed, by precision (default all)")
    parser.add_argument("--rounds", type=int, default=11, help="rounds per product, the median taken (default 11)")
    parser.add_argument("--shapes", action="store_true", help="also print each product's rate")
    args = parser.parse_args(argv)
    rows, shapes = [], []
    for network in args.networks:
        for batch in args.batches:
            for threads in args.threads:
                times = network_times(network, batch, threads, args.rounds, tuple(args.precisions))
                shapes.append((network, batch, threads, times))
                rows.append((network, batch, threads, network_rates(times)))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows), end="")
    if args.shapes:
        print()
        print(shape_table(shapes), end="")


if __name__ == "__main__":
    main()
