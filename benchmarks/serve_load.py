"""Load on `kuiper serve`: throughput and latency of HTTP with JSON tensors, HTTP with binary
tensors and gRPC, at 1, 8 and 32 concurrent clients, as Triton's perf_analyzer measures them.

``python -m benchmarks.serve_load`` starts `kuiper serve` on free loopback ports (joining
requests up to ``--max-batch-size`` samples; ``--batching on off`` adds a server that does
not join them) and, for each number of clients and each protocol, sends single-image
inference requests for the bundled EfficientNet-Lite0 through Triton's own clients
(tritonclient.http with JSON or binary tensors, tritonclient.grpc with raw contents). Like
perf_analyzer's concurrency mode, the load is a closed loop: each client has one request
outstanding and sends the next when the last is answered, over its own connection. After a
warm-up, each row runs until ``--requests`` have been answered or ``--seconds`` have passed,
in ``--rounds`` slices that take turns with the other rows of the same number of clients, so
that a change in the machine's load hits them alike. It prints a markdown table: requests a
second and the 50th and 99th percentile of the latency each client saw. The clients are
threads of one Python process, which shares the machine with the server: on a small machine
they take part of its CPU, as perf_analyzer would.

Everything stays on this machine: the server listens on 127.0.0.1 only and the clients
connect there.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kuiperinfer.models import efficientnet_lite0_path

HEADER_LENGTH = "Inference-Header-Content-Length"


@dataclass
class Server:
    """A `kuiper serve` process: its addresses, the process, and what it printed so far."""

    host: str
    port: int
    process: subprocess.Popen
    output: list[str]
    reader: threading.Thread
    grpc_port: int | None = None
    metrics_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def printed(self, timeout: float = 30.0) -> str:
        """Everything the process printed (stdout and stderr), once it has exited."""
        self.process.wait(timeout)
        self.reader.join(timeout)
        return "".join(self.output)


FREE_PORTS = ("--port", "0", "--grpc-port", "0", "--metrics-port", "0")
"""HTTP, gRPC and the metrics each on a free port."""


@contextlib.contextmanager
def running_server(models: Sequence[str], *options: str, timeout: float = 120.0, ready: bool = True,
                   ports: Sequence[str] = FREE_PORTS, env: dict[str, str] | None = None) -> Iterator[Server]:
    """`kuiper serve MODELS PORTS OPTIONS` on 127.0.0.1 (in ``env``), once it answers (ready,
    or with ``ready`` False live); stopped with SIGTERM after."""
    command = [sys.executable, "-m", "kuiperinfer.cli", "serve", *models, "--host", "127.0.0.1", *ports, *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output: list[str] = []
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:  # always drained, so that the server never blocks on a full pipe
        for line in process.stdout:
            output.append(line)
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        ports = _announced_ports(process, lines, output, timeout)
        server = Server("127.0.0.1", ports["http"], process, output, reader, ports.get("grpc"), ports.get("metrics"))
        _wait_ready(server, timeout, "/v2/health/ready" if ready else "/v2/health/live")
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(timeout=10)
        process.stdout.close()


def _announced_ports(process: subprocess.Popen, lines: queue.Queue[str], output: list[str],
                     timeout: float) -> dict[str, int]:
    """The ports in the server's ``serving on http://HOST:PORT/v2, gRPC HOST:PORT, metrics
    http://HOST:PORT/metrics`` line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        found = re.search(r"serving on http://\S+?:(\d+)/v2", line)
        if found:
            ports = {"http": int(found.group(1))}
            for name, pattern in (("grpc", r"gRPC \S+?:(\d+)"), ("metrics", r"metrics http://\S+?:(\d+)/")):
                if match := re.search(pattern, line):
                    ports[name] = int(match.group(1))
            return ports
    process.kill()
    process.wait()
    time.sleep(0.1)
    raise RuntimeError("kuiper serve did not start:\n" + "".join(output))


def _wait_ready(server: Server, timeout: float, path: str = "/v2/health/ready") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
            connection.request("GET", path)
            if connection.getresponse().status == 200:
                connection.close()
                return
            connection.close()
        time.sleep(0.05)
    raise RuntimeError(f"kuiper serve at {server.url} did not answer {path} in {timeout} s")


def binary_request(input_name: str, array: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """An inference request with one FP32 input as binary data, asking for binary outputs."""
    header = json.dumps({
        "inputs": [{"name": input_name, "datatype": "FP32", "shape": list(array.shape),
                    "parameters": {"binary_data_size": array.nbytes}}],
        "parameters": {"binary_data_output": True}}).encode()
    return header + array.astype("<f4").tobytes(), {
        "Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}


@dataclass
class LoadResult:
    clients: int
    requests: int
    seconds: float
    latencies: list[float]
    errors: int

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")


PROTOCOLS = ("http-json", "http-binary", "grpc")


def sender(protocol: str, server: Server, model: str, name: str, x: np.ndarray,
           output: str) -> tuple[Callable[[], object], Callable[[], None]]:
    """A client of its own for ``protocol``: a function sending one request (raising on an
    error) and one closing the client."""
    if protocol == "grpc":
        import tritonclient.grpc as triton_grpc

        client = triton_grpc.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        request = triton_grpc.InferInput(name, list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        outputs = [triton_grpc.InferRequestedOutput(output)]
    else:
        import tritonclient.http as triton_http

        client = triton_http.InferenceServerClient(f"{server.host}:{server.port}", connection_timeout=120,
                                                   network_timeout=120)
        binary = protocol == "http-binary"
        request = triton_http.InferInput(name, list(x.shape), "FP32")
        request.set_data_from_numpy(x, binary_data=binary)
        outputs = [triton_http.InferRequestedOutput(output, binary_data=binary)]
    return lambda: client.infer(model, [request], outputs=outputs).as_numpy(output), client.close


def load(server: Server, protocol: str, model: str, clients: int, requests: int, seconds: float) -> LoadResult:
    """``clients`` closed-loop clients of ``protocol`` sending until the bounds are reached."""
    from tritonclient.utils import InferenceServerException

    metadata = get_json(server, f"/v2/models/{model}")
    spec, output = metadata["inputs"][0], metadata["outputs"][0]["name"]
    x = np.random.default_rng(0).standard_normal([1 if d < 0 else d for d in spec["shape"]]).astype(np.float32)
    lock = threading.Lock()
    latencies: list[float] = []
    counts = {"sent": 0, "errors": 0}
    senders = [sender(protocol, server, model, spec["name"], x, output) for _ in range(clients)]
    deadline = time.monotonic() + seconds

    def client(send: Callable[[], object]) -> None:
        while time.monotonic() < deadline:
            with lock:
                if counts["sent"] >= requests:
                    return
                counts["sent"] += 1
            started = time.perf_counter()
            try:
                send()
                ok = True
            except (InferenceServerException, OSError):
                ok = False
            elapsed = time.perf_counter() - started
            with lock:
                if ok:
                    latencies.append(elapsed)
                else:
                    counts["errors"] += 1

    threads = [threading.Thread(target=client, args=(send,)) for send, _ in senders]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds_taken = time.perf_counter() - started
    for _, close in senders:
        close()
    return LoadResult(clients, len(latencies), seconds_taken, latencies, counts["errors"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(efficientnet_lite0_path()),
                        help="the .pnnx.param to serve (default: the bundled EfficientNet-Lite0)")
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS),
                        help="the ways to send requests (default: all three)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32],
                        help="numbers of concurrent clients (default: 1 8 32)")
    parser.add_argument("--batching", nargs="+", choices=["on", "off"], default=["on"],
                        help="servers to measure: joining requests (on) and not (off) (default: on)")
    parser.add_argument("--requests", type=int, default=2000,
                        help="most requests answered per row (default: 2000)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="most seconds per row (default: 20)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="requests per client before each row (default: 10)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="slices each row is measured in, taking turns with the other rows of the "
                             "same number of clients (default: 3)")
    parser.add_argument("--max-batch-size", type=int, default=8,
                        help="the batching server's --max-batch-size (default: 8)")
    parser.add_argument("--batch-window-ms", type=float, default=2.0,
                        help="the batching server's --batch-window-ms (default: 2)")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= args.requests <= 1_000_000 or not 0 < args.seconds <= 3600:
        parser.error("--requests must be 1 to 1000000 (at least --rounds, 1 or more) and --seconds "
                     "more than 0, at most 3600")
    if not all(1 <= clients <= 256 for clients in args.clients):
        parser.error("--clients must be 1 to 256")

    name = "model"
    options = {"on": ["--max-batch-size", str(args.max_batch_size),
                      "--batch-window-ms", str(args.batch_window_ms)],
               "off": ["--max-batch-size", "1"]}
    rows = []
    with contextlib.ExitStack() as stack:
        servers = {batching: stack.enter_context(running_server([f"{name}={args.model}"], *options[batching]))
                   for batching in dict.fromkeys(args.batching)}
        cells = [(batching, protocol) for batching in servers for protocol in args.protocols]
        for clients in args.clients:
            for batching, protocol in cells:
                load(servers[batching], protocol, name, clients, args.warmup * clients, args.seconds)
            slices: dict[tuple[str, str], list[LoadResult]] = {cell: [] for cell in cells}
            for round_number in range(args.rounds):
                share = args.requests // args.rounds + (round_number < args.requests % args.rounds)
                for batching, protocol in cells:
                    time.sleep(0.3)  # the previous row's idle threads settle first
                    slices[batching, protocol].append(load(servers[batching], protocol, name, clients, share,
                                                           args.seconds / args.rounds))
            for (batching, protocol), results in slices.items():
                result = LoadResult(clients, sum(r.requests for r in results), sum(r.seconds for r in results),
                                    [t for r in results for t in r.latencies], sum(r.errors for r in results))
                rows.append((protocol, batching, result))
                print(f"{protocol}, batching {batching}, {clients} clients: {result.requests} requests in "
                      f"{result.seconds:.1f} s, {result.errors} errors", file=sys.stderr, flush=True)
    print(table(rows, Path(args.model).name, args))
    return 0


def get_json(server: Server, path: str) -> dict:
    """The JSON answer to ``GET path``."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        connection.request("GET", path)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def cpu_name() -> str:
    """The processor's model name (Linux), else what the platform module knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def table(rows: Sequence[tuple[str, str, LoadResult]], model: str, args: argparse.Namespace) -> str:
    """The markdown table, with what it ran on."""
    setting = (f"{model}, one image a request, {cpu_name()}, {os.cpu_count()} CPUs; batching: "
               f"up to {args.max_batch_size} samples within {args.batch_window_ms:g} ms")
    lines = [setting, "",
             "| clients | protocol | batching | requests/s | p50 ms | p99 ms | requests | errors |",
             "|---:|---|---|---:|---:|---:|---:|---:|"]
    order = {protocol: i for i, protocol in enumerate(PROTOCOLS)}
    for protocol, batching, result in sorted(rows, key=lambda row: (row[2].clients, order[row[0]], row[1] == "on")):
        lines.append(f"| {result.clients} | {protocol} | {batching} | {result.throughput:.1f} | "
                     f"{result.percentile(50) * 1000:.1f} | {result.percentile(99) * 1000:.1f} | "
                     f"{result.requests} | {result.errors} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
