"""`kuiper serve --ray`: the server as a Ray Serve application of two replicas, reached through
Ray Serve's HTTP proxy with Triton's client, on a local Ray cluster the command starts.

The command runs in a process of its own, as a user runs it; afterwards no process of its
cluster may be left (they carry a mark in their environment, as in test_ray.py).
"""

from __future__ import annotations

import http.client
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as triton
from cli_runner import DEMO, run
from test_ray import MARK, RAY_LOG, leftover_processes

import kuiperinfer
from benchmarks.serve_load import HEADER_LENGTH, binary_request, running_server
from kuiperinfer.models import efficientnet_lite0_path

pytestmark = pytest.mark.timeout(600)

DEMO_INPUT, DEMO_OUTPUT = "pnnx_input_0", "12"


def infer(server, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """One request of its own data: the input, the answer, and the replica that gave it (the
    client reads the answer's headers itself: tritonclient does not show them)."""
    x = np.random.default_rng(seed).standard_normal((1 + seed % 3, 3, 64, 64)).astype(np.float32)
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        connection.request("POST", "/v2/models/demo/infer", *binary_request(DEMO_INPUT, x))
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body
        values = np.frombuffer(body[int(response.getheader(HEADER_LENGTH)):], "<f4").reshape(x.shape[0], 10)
        return x, values, response.getheader("Kuiper-Replica")
    finally:
        connection.close()


def test_two_replicas_behind_ray_serves_proxy_answer_concurrent_requests():
    value = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {MARK: value}
    graph = kuiperinfer.load(DEMO)
    with running_server([f"demo={DEMO}", f"efficientnet={efficientnet_lite0_path()}"], "--ray", "--replicas", "2",
                        ports=("--port", "0"), env=env, timeout=300) as server:
        url = f"{server.host}:{server.port}"
        client = triton.InferenceServerClient(url)
        try:
            assert client.is_server_ready() and client.is_model_ready("demo") and client.is_model_ready("efficientnet")
            assert client.get_model_metadata("demo")["inputs"] == [
                {"name": DEMO_INPUT, "datatype": "FP32", "shape": [-1, 3, 64, 64]}]
            assert "model_repository" not in client.get_server_metadata()["extensions"]
            with pytest.raises(triton.InferenceServerException, match="does not load or unload models"):
                client.load_model("demo")
        finally:
            client.close()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(infer, [server] * 64, range(64)))
        server.process.terminate()
        printed = server.printed(timeout=120)
    for x, answer, _ in answers:
        np.testing.assert_allclose(answer, graph(x), atol=1e-6)
    replicas = {replica for _, _, replica in answers}
    assert len(replicas) == 2, replicas
    assert server.process.returncode == 0, printed
    assert "serving on http://127.0.0.1:" in printed and "(Ray Serve, 2 replicas of 1 CPU)" in printed
    ours = [line for line in printed.splitlines() if line.strip() and not RAY_LOG.match(line)]
    assert ours[-1] == "stopped", printed   # the lines Ray forwards from its processes aside
    assert leftover_processes(value, wait=60) == []


def test_ray_options_are_checked(capsys):
    code, _, err = run(capsys, "serve", str(DEMO), "--replicas", "2")
    assert code == 2 and "--replicas and --address only with --ray" in err
    code, _, err = run(capsys, "serve", str(DEMO), "--ray", "--grpc-port", "9001")
    assert code == 2 and "--grpc-port: not with --ray" in err
