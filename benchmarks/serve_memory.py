"""Memory of `kuiper serve` under sustained load: its resident set must stay flat.

``python -m benchmarks.serve_memory`` starts `kuiper serve` on free loopback ports and sends
``--requests`` requests (10,000 by default) from ``--clients`` closed-loop clients, each
sending its next request when the last is answered, taking turns at HTTP with JSON tensors,
HTTP with binary tensors, gRPC, and a request that does not fit the model (answered 400 or
INVALID_ARGUMENT). A thread samples the server's resident set (``VmRSS`` of /proc, Linux)
every ``--sample-seconds``. It prints the samples; after the warm-up (the first ``--warmup``
requests, a third by default, while the allocator and caches fill), how much the peak of the
second half of the samples exceeds the first half's, and the slope of a least-squares line
through them, in KiB per 1,000 requests: a leak shows as growth that stays above zero
however long the run.

Everything stays on this machine: the server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.serve_load import Server, binary_request, get_json, running_server
from kuiperinfer.models import efficientnet_lite0_path

KINDS = ("http-json", "http-binary", "grpc", "bad")


def rss_bytes(pid: int) -> int:
    """The resident set of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class MemoryRun:
    """RSS samples as (requests answered so far, bytes), and the requests that failed
    unexpectedly (a good request not answered, a bad one not refused as it should be)."""

    samples: list[tuple[int, int]]
    requests: int
    warmup: int
    unexpected: int
    kinds: dict[str, int]
    """Requests of each of KINDS."""

    def after_warmup(self) -> list[tuple[int, int]]:
        return [(n, rss) for n, rss in self.samples if n >= self.warmup]

    @property
    def growth(self) -> int:
        """Bytes the resident set grew after the warm-up: its peak in the second half of the
        samples after it, less its peak in the first half (peaks, because the allocator gives
        memory back and takes it again in between; a leak raises the peak for good)."""
        kept = [rss for _, rss in self.after_warmup()]
        half = len(kept) // 2
        return max(kept[half:]) - max(kept[:half] or kept)

    @property
    def slope(self) -> float:
        """Least-squares growth after the warm-up, in bytes per request."""
        kept = np.array(self.after_warmup(), dtype=np.float64)
        if len(kept) < 2 or np.ptp(kept[:, 0]) == 0:
            return 0.0
        return float(np.polyfit(kept[:, 0], kept[:, 1], 1)[0])


def measure(server: Server, model: str, requests: int, clients: int = 4, warmup: int | None = None,
            sample_seconds: float = 0.25) -> MemoryRun:
    """Send ``requests`` to ``model`` on ``server`` (each of KINDS in turn), sampling its RSS."""
    import grpc
    from tritonclient.grpc import service_pb2

    metadata = get_json(server, f"/v2/models/{model}")["inputs"][0]
    shape = [1 if d < 0 else d for d in metadata["shape"]]
    name = metadata["name"]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    bodies = {
        "http-json": (json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": shape,
                                              "data": x.ravel().tolist()}]}).encode(),
                      {"Content-Type": "application/json"}),
        "http-binary": binary_request(name, x),
        "bad": (json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": shape, "data": [0.0]}]}).encode(),
                {"Content-Type": "application/json"}),
    }
    good = service_pb2.ModelInferRequest(model_name=model)
    good.inputs.add(name=name, datatype="FP32", shape=shape)
    good.raw_input_contents.append(x.astype("<f4").tobytes())
    bad = service_pb2.ModelInferRequest(model_name=model)
    bad.inputs.add(name=name, datatype="FP32", shape=[0, *shape[1:]])
    messages = {"grpc": good.SerializeToString(), "bad": bad.SerializeToString()}

    lock = threading.Lock()
    counts = {"sent": 0, "answered": 0, "unexpected": 0}
    kinds = dict.fromkeys(KINDS, 0)
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def client() -> None:
        connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
        channel = grpc.insecure_channel(f"{server.host}:{server.grpc_port}")
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            while True:
                with lock:
                    if counts["sent"] >= requests:
                        return
                    number = counts["sent"]
                    counts["sent"] += 1
                kind = KINDS[number % len(KINDS)]
                if kind == "grpc" or (kind == "bad" and number % 2):
                    try:
                        infer(messages[kind], timeout=120)
                        expected = kind == "grpc"
                    except grpc.RpcError as error:
                        expected = kind == "bad" and error.code() == grpc.StatusCode.INVALID_ARGUMENT
                else:
                    expected = post(connection, f"/v2/models/{model}/infer", *bodies[kind]) == \
                        (400 if kind == "bad" else 200)
                with lock:
                    counts["answered"] += 1
                    counts["unexpected"] += not expected
                    kinds[kind] += 1
        finally:
            connection.close()
            channel.close()

    def sample() -> None:
        while not done.is_set():
            with lock:
                answered = counts["answered"]
            samples.append((answered, rss_bytes(server.process.pid)))
            done.wait(sample_seconds)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    sampler.join()
    samples.append((counts["answered"], rss_bytes(server.process.pid)))
    return MemoryRun(samples, counts["answered"], requests // 3 if warmup is None else warmup, counts["unexpected"],
                     kinds)


def post(connection: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]) -> int:
    """The status of a POST on a keep-alive connection, sent again on a new one if the server
    had closed it (uvicorn closes a connection idle for 5 s)."""
    def send() -> int:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status

    try:
        return send()
    except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
        connection.close()
        return send()


def report(run: MemoryRun, rows: int = 12) -> str:
    mib = 1024 * 1024
    step = max(1, len(run.samples) // rows)
    lines = ["| requests answered | RSS MiB |", "|---:|---:|"]
    lines += [f"| {n} | {rss / mib:.1f} |" for n, rss in run.samples[::step]]
    if (len(run.samples) - 1) % step:
        n, rss = run.samples[-1]
        lines.append(f"| {n} | {rss / mib:.1f} |")
    lines.append("")
    kinds = ", ".join(f"{n} {kind}" for kind, n in run.kinds.items())
    lines.append(f"{run.requests} requests ({kinds}; {run.unexpected} unexpected answers); "
                 f"after the first {run.warmup}: the peak RSS grew {run.growth / mib:+.1f} MiB, "
                 f"slope {run.slope * 1000 / 1024:+.1f} KiB per 1,000 requests")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(efficientnet_lite0_path()),
                        help="the .pnnx.param to serve (default: the bundled EfficientNet-Lite0)")
    parser.add_argument("--requests", type=int, default=10_000, help="requests to send (default: 10000)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default: 4)")
    parser.add_argument("--warmup", type=int, help="requests before the growth counts (default: a third)")
    parser.add_argument("--sample-seconds", type=float, default=0.25, help="between RSS samples (default: 0.25)")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 1_000_000 or not 1 <= args.clients <= 256:
        parser.error("--requests must be 1 to 1000000 and --clients 1 to 256")
    started = time.monotonic()
    with running_server([f"model={args.model}"]) as server:
        run = measure(server, "model", args.requests, args.clients, args.warmup, args.sample_seconds)
    print(f"{Path(args.model).name}, {args.clients} clients, {time.monotonic() - started:.0f} s")
    print(report(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
