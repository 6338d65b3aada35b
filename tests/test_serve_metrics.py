"""`kuiper serve`'s Prometheus metrics: after known traffic, every count is what was sent.

The server runs in a subprocess with a long batch window, so that requests sent together
are joined into one run and the queue can be seen while they wait.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as triton
from cli_runner import DEMO
from prometheus_client.parser import text_string_to_metric_families
from serving import DEMO_INPUT

import kuiperinfer
from benchmarks.serve_load import binary_request, running_server

WINDOW_MS = 3000


def scrape(server) -> dict[tuple[str, tuple], float]:
    """Every sample of the metrics endpoint, by name and sorted labels."""
    text = urllib.request.urlopen(f"http://{server.host}:{server.metrics_port}/metrics", timeout=30).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def demo(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({"model": "demo", "version": "1", **labels}.items())))]


def post(server, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def images(seed: int, batch: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 64, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def graph():
    return kuiperinfer.load(DEMO)


def test_counts_after_known_traffic(graph):
    with running_server([f"demo={DEMO}"], "--batch-window-ms", str(WINDOW_MS), "--max-queue", "4") as server:
        before = scrape(server)
        for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
                     "nv_inference_pending_request_count", "kuiper_inference_batch_size_count"):
            assert demo(before, name) == 0, name

        # 1. two requests alone, of batch 1 (HTTP) and batch 3 (gRPC)
        status, _ = post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, images(0, 1)))
        assert status == 200
        client = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        request = triton.InferInput(DEMO_INPUT, [3, 3, 64, 64], "FP32")
        request.set_data_from_numpy(images(1, 3))
        client.infer("demo", [request])

        # 2. four requests of batch 1 at once wait in the queue, joined into one run; a fifth finds it full
        answers = {}

        def send(seed: int) -> None:
            answers[seed] = post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, images(seed, 1)))

        senders = [threading.Thread(target=send, args=(seed,)) for seed in range(10, 14)]
        for sender in senders:
            sender.start()
        deadline = time.monotonic() + WINDOW_MS / 1000
        while demo(waiting := scrape(server), "nv_inference_pending_request_count") < 4:
            assert time.monotonic() < deadline, "the four requests should be waiting together"
            time.sleep(0.05)
        send(14)
        for sender in senders:
            sender.join()

        # 3. two requests that do not fit the model, one for an unknown model (counted nowhere)
        assert post(server, "/v2/models/demo/infer", b'{"inputs": [', {})[0] == 400
        bad = triton.InferInput(DEMO_INPUT, [1, 3, 32, 32], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3, 32, 32), np.float32))
        with pytest.raises(Exception, match="has shape"):
            client.infer("demo", [bad])
        assert post(server, "/v2/models/resnet/infer", b"{}", {})[0] == 404
        client.close()
        after = scrape(server)

    assert demo(waiting, "nv_inference_pending_request_count") == 4
    assert sorted(status for status, _ in answers.values()) == [200, 200, 200, 200, 503]
    for seed, (status, body) in answers.items():
        if status == 200:
            length = len(body) - 40
            np.testing.assert_allclose(np.frombuffer(body[length:], "<f4").reshape(1, 10), graph(images(seed, 1)),
                                       atol=1e-6)
    assert demo(after, "nv_inference_request_success") == 6
    assert demo(after, "nv_inference_count") == 1 + 3 + 4
    assert demo(after, "nv_inference_exec_count") == 3
    assert demo(after, "nv_inference_request_failure", reason="OTHER") == 2
    assert demo(after, "nv_inference_request_failure", reason="REJECTED") == 1
    assert demo(after, "nv_inference_request_failure", reason="BACKEND") == 0
    assert demo(after, "nv_inference_pending_request_count") == 0
    histogram = {bound: demo(after, "kuiper_inference_batch_size_bucket", le=bound) for bound in ("1", "2", "4", "+Inf")}
    assert histogram == {"1": 1, "2": 1, "4": 3, "+Inf": 3}
    assert demo(after, "kuiper_inference_batch_size_sum") == 8
    assert demo(after, "kuiper_inference_batch_size_count") == 3
    # the joined requests waited about the window; every answered request's time adds up
    queued_us = demo(after, "nv_inference_queue_duration_us")
    assert 4 * WINDOW_MS * 1000 * 0.8 < queued_us
    assert demo(after, "nv_inference_request_duration_us") > queued_us
    assert demo(after, "nv_inference_compute_infer_duration_us") > 0
    assert after[("process_resident_memory_bytes", ())] > 10 * 2**20


def test_metrics_agree_with_the_statistics_endpoint():
    with running_server([f"demo={DEMO}"]) as server:
        for seed in range(5):
            assert post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, images(seed, 2)))[0] == 200
        samples = scrape(server)
        connection = http.client.HTTPConnection(server.host, server.port, timeout=30)
        connection.request("GET", "/v2/models/demo/stats")
        [stats] = json.loads(connection.getresponse().read())["model_stats"]
        connection.close()
    assert demo(samples, "nv_inference_request_success") == stats["inference_stats"]["success"]["count"] == 5
    assert demo(samples, "nv_inference_count") == stats["inference_count"] == 10
    assert demo(samples, "nv_inference_exec_count") == stats["execution_count"] == 5
    assert demo(samples, "nv_inference_queue_duration_us") == stats["inference_stats"]["queue"]["ns"] // 1000
    assert [entry["batch_size"] for entry in stats["batch_stats"]] == [2]
