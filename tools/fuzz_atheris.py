"""Coverage-guided fuzzing of the .param reader and the expression parser with atheris.

Optional (``pip install atheris``); not part of the test suite. Each target feeds
libFuzzer's mutated bytes to one parser and fails on anything but success or our own
error (a :class:`~kuiperinfer.errors.KuiperError`), and on a case slower than a second::

    .venv/bin/python -m tools.fuzz_atheris param /tmp/corpus-param -max_total_time=180
    .venv/bin/python -m tools.fuzz_atheris expression /tmp/corpus-expr -max_total_time=180
    .venv/bin/python -m tools.fuzz_atheris load /tmp/corpus-load -max_total_time=180

The corpus directory is seeded with valid inputs when empty (a small pnnx export, real
expressions); arguments after it go to libFuzzer (``-runs=N``, ``-max_len=N``). ``load``
also builds the runtime graph (layer creation) of whatever the reader accepts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["kuiperinfer"]):
    from kuiperinfer import layers  # noqa: F401  (registers every layer, instrumented)
    from kuiperinfer.errors import KuiperError
    from kuiperinfer.expression import compile_expression
    from kuiperinfer.pnnx import parse_param
    from kuiperinfer.runtime.graph import RuntimeGraph

SLOW = 1.0
"""Seconds after which one input counts as a hang."""

SEED_PARAM = b"""7767517
6 6
pnnx.Input               pnnx_input_0             0 1 0 #0=(1,3,8,8)f32
nn.Conv2d                conv                     1 1 0 1 bias=False dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=4 padding=(1,1) padding_mode=zeros stride=(1,1) @weight=(4,3,3,3)f32 $input=0 #0=(1,3,8,8)f32 #1=(1,4,8,8)f32
torch.split              split                    1 2 1 2 3 dim=1 split_size_or_sections=(1,3) $tensor=1 #1=(1,4,8,8)f32 #2=(1,1,8,8)f32 #3=(1,3,8,8)f32
torch.cat                cat                      2 1 2 3 4 dim=1 #2=(1,1,8,8)f32 #3=(1,3,8,8)f32 #4=(1,4,8,8)f32
pnnx.Expression          expr                     1 1 4 5 expr=add(mul(@0,2),size(@0,1)) #4=(1,4,8,8)f32 #5=(1,4,8,8)f32
pnnx.Output              pnnx_output_0            1 0 5
"""
SEED_EXPRESSIONS = [b"add(mul(@0,0.5),@1)", b"[size(@0,0),-1,int(div(size(@0,2),2))]",
                    b"pow(sqrt(abs(@0)),2.000000e+00)", b"max(@0,-inf)"]


def _checked(work, data: bytes) -> None:
    """Run ``work(data)``; our own errors are fine, anything else or a slow case is a finding."""
    start = time.perf_counter()
    try:
        work(data)
    except KuiperError:
        pass
    elapsed = time.perf_counter() - start
    if elapsed > SLOW:
        raise RuntimeError(f"slow input: {elapsed:.2f} s for {len(data)} bytes")


def _param(data: bytes) -> None:
    parse_param(data)


def _expression(data: bytes) -> None:
    compile_expression(data.decode("utf-8", "replace"))


def _load(data: bytes) -> None:
    graph = parse_param(data, max_tensor_bytes=1 << 20)
    for op in graph.ops:       # declared weights as zeros: no archive needed
        for attribute in op.attrs.values():
            attribute.data = bytes(attribute.nbytes())
    runtime = RuntimeGraph()
    runtime.init(graph)
    runtime.build()


TARGETS = {"param": _param, "expression": _expression, "load": _load}
SEEDS = {"param": [SEED_PARAM], "expression": SEED_EXPRESSIONS, "load": [SEED_PARAM]}


def _seed_corpus(directory: Path, seeds: list[bytes]) -> None:
    """Put the valid seeds into an empty corpus directory, so mutation starts from them."""
    directory.mkdir(parents=True, exist_ok=True)
    if not any(directory.iterdir()):
        for i, seed in enumerate(seeds):
            (directory / f"seed{i}").write_bytes(seed)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{'|'.join(TARGETS)}}} CORPUS_DIR [libFuzzer options]")
    name, corpus = argv[1], Path(argv[2])
    _seed_corpus(corpus, SEEDS[name])
    work = TARGETS[name]
    atheris.Setup([argv[0], str(corpus), *argv[3:]], lambda data: _checked(work, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
