"""What the serving tests share: the two models they serve (the demo CNN and the bundled
EfficientNet-Lite0), with their input and output names, `kuiper serve` of both, and the same
models loaded in the test's own process, to compare the server's answers with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cli_runner import DEMO

import kuiperinfer
from benchmarks.serve_load import Server, running_server
from kuiperinfer.models import efficientnet_lite0_path
from kuiperinfer.runtime.graph import RuntimeGraph

DEMO_INPUT, DEMO_OUTPUT = "pnnx_input_0", "12"
NET_INPUT, NET_OUTPUT = "pnnx_input_0", "99"


@contextlib.contextmanager
def serving_both(*options: str) -> Iterator[Server]:
    """`kuiper serve` of ``demo`` and ``efficientnet`` with ``options``, in a subprocess; once
    stopped, it must have logged no error and exited cleanly, whatever the tests sent."""
    with running_server([f"demo={DEMO}", f"efficientnet={efficientnet_lite0_path()}"], *options) as running:
        yield running
    printed = running.printed()
    assert "Traceback" not in printed and "ERROR" not in printed, printed
    assert running.process.returncode == 0, printed


def local_graphs() -> dict[str, RuntimeGraph]:
    """Both models loaded in this process, by the names the server gives them."""
    return {"demo": kuiperinfer.load(DEMO), "efficientnet": kuiperinfer.load(efficientnet_lite0_path())}
