"""`kuiper serve`: the Open Inference Protocol over HTTP, tested with Triton's own client.

The server runs as `kuiper serve` does for users, in a subprocess on a free loopback port,
serving two models at once: the tiny demo CNN and the bundled EfficientNet-Lite0. What
tritonclient does not cover (malformed bodies, size limits, hostile connections,
shutdown) is sent as plain HTTP or raw bytes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as triton
import uvicorn
from cli_runner import DEMO, run
from oracle import Lambda, export
from serving import DEMO_INPUT, DEMO_OUTPUT, NET_INPUT, NET_OUTPUT, local_graphs, serving_both
from tritonclient.utils import InferenceServerException

import kuiperinfer
from benchmarks.serve_load import Server, binary_request, running_server
from benchmarks.serve_load import main as load_main
from kuiperinfer.cli.serve import _listen
from kuiperinfer.errors import InferError
from kuiperinfer.models import sample_images
from kuiperinfer.runtime.batching import Batching
from kuiperinfer.serve import create_app
from kuiperinfer.serve.batcher import Batcher
from kuiperinfer.serve.model import ServedModel
from kuiperinfer.serve.protocol import (
    HEADER_LENGTH,
    ProtocolError,
    TensorSpec,
    parse_infer_request,
)
from kuiperinfer.vision.preprocess import EFFICIENTNET_LITE

BODY_LIMIT = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def server():
    """The server every test shares."""
    with serving_both("--max-body-mb", str(BODY_LIMIT / 1024 / 1024)) as running:
        yield running


@pytest.fixture(scope="module")
def graphs():
    return local_graphs()


@pytest.fixture
def client(server):
    connection = triton.InferenceServerClient(f"{server.host}:{server.port}")
    yield connection
    connection.close()


def post(server, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """Status, headers (names in lower case) and body of a plain HTTP POST."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def get(server, path: str, method: str = "GET") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def demo_request(data, shape=(1, 3, 64, 64), datatype="FP32", name=DEMO_INPUT, **extra) -> bytes:
    tensor = {"name": name, "datatype": datatype, "shape": list(shape)}
    if data is not None:
        tensor["data"] = data
    return json.dumps({"inputs": [tensor], **extra}).encode()


def rng_images(seed: int, batch: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)


def assert_serving(client, graphs) -> None:
    """A good request still gets the right answer."""
    x = rng_images(99, 1, 64)
    request = triton.InferInput(DEMO_INPUT, x.shape, "FP32")
    request.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("demo", [request]).as_numpy(DEMO_OUTPUT),
                               graphs["demo"](x), atol=1e-6)


# -- health and metadata ----------------------------------------------------------------

def test_health_and_metadata(client, server):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("demo") and client.is_model_ready("efficientnet")
    assert not client.is_model_ready("resnet")
    metadata = client.get_server_metadata()
    assert metadata["name"] == "kuiperinfer" and "binary_tensor_data" in metadata["extensions"]
    assert client.get_model_metadata("efficientnet") == {
        "name": "efficientnet", "versions": ["1"], "platform": "kuiperinfer_pnnx",
        "inputs": [{"name": NET_INPUT, "datatype": "FP32", "shape": [-1, 3, 224, 224]}],
        "outputs": [{"name": NET_OUTPUT, "datatype": "FP32", "shape": [-1, 1000]}], "max_batch_size": 8}
    assert client.get_model_metadata("demo")["outputs"] == [
        {"name": DEMO_OUTPUT, "datatype": "FP32", "shape": [-1, 10]}]
    config = client.get_model_config("demo")
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": DEMO_INPUT, "data_type": "TYPE_FP32", "dims": [3, 64, 64]}]

    status, body = get(server, "/v2/models/demo/versions/1")
    assert status == 200 and json.loads(body) == client.get_model_metadata("demo")
    assert get(server, "/v2/models/demo/versions/1/ready")[0] == 200
    for path in ("/v2/models/resnet", "/v2/models/demo/versions/2", "/v2/nowhere"):
        status, body = get(server, path)
        assert status == 404 and "error" in json.loads(body), path
    status, body = get(server, "/v2/models/demo/infer")
    assert status == 405 and "not allowed" in json.loads(body)["error"]


# -- inference --------------------------------------------------------------------------

@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
def test_infer_json_and_binary_match_the_engine(client, graphs, binary_in, binary_out):
    x = rng_images(1, 3, 64)
    request = triton.InferInput(DEMO_INPUT, x.shape, "FP32")
    request.set_data_from_numpy(x, binary_data=binary_in)
    result = client.infer("demo", [request], request_id="req-7",
                          outputs=[triton.InferRequestedOutput(DEMO_OUTPUT, binary_data=binary_out)])
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_name"] == "demo"
    assert ("data" in response["outputs"][0]) != binary_out
    np.testing.assert_allclose(result.as_numpy(DEMO_OUTPUT), graphs["demo"](x), atol=1e-6)


def test_efficientnet_classifies_the_bundled_photos(client, graphs):
    images = EFFICIENTNET_LITE.batch(sample_images())
    request = triton.InferInput(NET_INPUT, images.shape, "FP32")
    request.set_data_from_numpy(images)
    logits = client.infer("efficientnet", [request]).as_numpy(NET_OUTPUT)
    expected = graphs["efficientnet"](images)
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    assert np.array_equal(logits.argmax(1), expected.argmax(1))


def test_concurrent_requests_are_joined_and_split_back(server, graphs):
    client = triton.InferenceServerClient(f"{server.host}:{server.port}", concurrency=8)
    try:
        before = client.get_inference_statistics("efficientnet")["model_stats"][0]
        batches = [1, 2, 1, 1, 3, 1, 2, 1, 1, 1, 2, 1]
        inputs = [rng_images(10 + i, n, 224) for i, n in enumerate(batches)]
        pending = []
        for x in inputs:
            request = triton.InferInput(NET_INPUT, x.shape, "FP32")
            request.set_data_from_numpy(x, binary_data=True)
            pending.append(client.async_infer("efficientnet", [request]))
        results = [p.get_result().as_numpy(NET_OUTPUT) for p in pending]
        after = client.get_inference_statistics("efficientnet")["model_stats"][0]
    finally:
        client.close()
    for x, result in zip(inputs, results):
        assert result.shape == (x.shape[0], 1000)
        np.testing.assert_allclose(result, graphs["efficientnet"](x), atol=1e-4)
    assert after["inference_count"] - before["inference_count"] == sum(batches)
    assert after["execution_count"] - before["execution_count"] < len(batches)  # some were joined


# -- bad requests -----------------------------------------------------------------------

def test_bad_requests_through_the_client_get_400(client, graphs):
    x = rng_images(2, 1, 64)
    cases = [
        (triton.InferInput(DEMO_INPUT, [1, 3, 32, 32], "FP32"), x[:, :, :32, :32],
         "has shape [1, 3, 32, 32]"),
        (triton.InferInput(DEMO_INPUT, x.shape, "FP64"), x.astype(np.float64), "expects FP32"),
        (triton.InferInput("image", x.shape, "FP32"), x, "unexpected inference input 'image'"),
        (triton.InferInput(DEMO_INPUT, x.shape, "INT64"), x.astype(np.int64), "expects FP32"),
    ]
    for request, data, message in cases:
        request.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as raised:
            client.infer("demo", [request])
        assert raised.value.status() == "400" and message in raised.value.message()
    request = triton.InferInput(DEMO_INPUT, x.shape, "FP32")
    request.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException, match="unexpected inference output 'logits'") as raised:
        client.infer("demo", [request], outputs=[triton.InferRequestedOutput("logits")])
    assert raised.value.status() == "400"
    with pytest.raises(InferenceServerException, match="unknown model 'resnet'") as raised:
        client.infer("resnet", [request])
    assert raised.value.status() == "404"
    assert_serving(client, graphs)


ZEROS = [0.0] * (3 * 64 * 64)


@pytest.mark.parametrize("body, message", [
    (b'{"inputs": [', "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"inputs": []}', "non-empty list of 'inputs'"),
    (demo_request(ZEROS, datatype="BYTES"), "has datatype BYTES, model 'demo' expects FP32"),
    (demo_request(ZEROS, datatype="FLOAT"), "unknown datatype 'FLOAT'"),
    (demo_request(ZEROS, shape=(0, 3, 64, 64)), "has shape [0, 3, 64, 64]"),
    (demo_request(ZEROS, shape=(1, 3, 64)), "has shape [1, 3, 64]"),
    (demo_request(ZEROS, shape=(1, 3, 64, "64")), "needs a 'shape'"),
    (demo_request(None), "has no 'data' and no binary_data_size"),
    (demo_request(ZEROS[:-1]), "needs 12288 values, 'data' has 12287"),
    (demo_request(["a"] * len(ZEROS)), "does not hold FP32 values"),
    (demo_request([[0.0, 0.0], [0.0]]), "not a regular array"),
    (demo_request(ZEROS, outputs=[{"name": DEMO_OUTPUT, "parameters": {"classification": 3}}]),
     "classification extension is not supported"),
    (demo_request(ZEROS, id=7), "'id' must be a string"),
    (json.dumps({"inputs": [json.loads(demo_request(ZEROS))["inputs"][0]] * 2}).encode(), "given twice"),
])
def test_bad_json_requests_get_400_with_an_error_body(server, body, message):
    status, headers, content = post(server, "/v2/models/demo/infer", body)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert message in json.loads(content)["error"]


def binary_demo_request(declared: int, payload: bytes, header_length: str | None = None):
    header = json.dumps({"inputs": [{"name": DEMO_INPUT, "datatype": "FP32", "shape": [1, 3, 64, 64],
                                     "parameters": {"binary_data_size": declared}}]}).encode()
    return header + payload, {"Content-Type": "application/octet-stream",
                              HEADER_LENGTH: header_length or str(len(header))}


@pytest.mark.parametrize("declared, payload, header_length, message", [
    (100, b"\0" * 100, None, "takes 49152 bytes, binary_data_size says 100"),
    (49152, b"\0" * 1000, None, "needs 49152 bytes of binary data, 1000 are left"),
    (49152, b"\0" * 49160, None, "49160 bytes of binary tensor data"),
    (49152, b"\0" * 49152, "abc", "must be a whole number"),
    (49152, b"\0" * 49152, "999999999", "the body has"),
    (49152, b"\0" * 49152, "20", "not valid JSON"),
])
def test_bad_binary_requests_get_400(server, declared, payload, header_length, message):
    body, headers = binary_demo_request(declared, payload, header_length)
    status, _, content = post(server, "/v2/models/demo/infer", body, headers)
    assert status == 400 and message in json.loads(content)["error"]


def raw_exchange(server, data: bytes, read_timeout: float = 30.0) -> bytes:
    """Send raw bytes on a new connection; what the server answered before closing or a pause."""
    with socket.create_connection((server.host, server.port), timeout=read_timeout) as connection:
        connection.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def test_a_body_over_the_limit_is_refused_unread(server, client, graphs):
    start = (f"POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             f"Content-Length: {BODY_LIMIT + 1}\r\n\r\n").encode()
    answer = raw_exchange(server, start + b'{"inputs": [')
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"over the limit of 4194304 bytes" in answer

    chunks = [b"x" * (1024 * 1024)] * 4 + [b"x" * 1024]  # just over the limit, and no last chunk
    chunked = (b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for chunk in chunks))
    answer = raw_exchange(server, chunked)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"over the limit" in answer
    assert_serving(client, graphs)


def test_hostile_connections_do_not_wedge_the_server(server, client, graphs):
    idle = socket.create_connection((server.host, server.port))
    idle.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Le")  # and stalls
    cut = socket.create_connection((server.host, server.port))
    cut.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 50000\r\n\r\n{\"in")
    cut.close()  # gone in the middle of the body
    garbage = raw_exchange(server, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)))
    assert garbage == b"" or garbage.startswith(b"HTTP/1.1 400")
    deep = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, _, content = post(server, "/v2/models/demo/infer", deep)
    assert status == 400 and "error" in json.loads(content)

    failures = []

    def bad_then_good(seed: int) -> None:
        try:
            status, _, _ = post(server, "/v2/models/demo/infer", demo_request(ZEROS[:seed]))
            assert status == 400
            x = rng_images(seed, 1, 64)
            status, headers, content = post(server, "/v2/models/demo/infer",
                                            *binary_request(DEMO_INPUT, x))
            assert status == 200
            size = int(headers[HEADER_LENGTH.lower()])
            np.testing.assert_allclose(np.frombuffer(content[size:], "<f4").reshape(1, 10),
                                       graphs["demo"](x), atol=1e-6)
        except Exception as exc:  # noqa: BLE001  (reported by the main thread below)
            failures.append(exc)

    threads = [threading.Thread(target=bad_then_good, args=(seed,)) for seed in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert client.is_server_live()
    assert_serving(client, graphs)
    idle.close()


# -- the queue limit and shutdown -----------------------------------------------------------

def test_full_queue_gets_503_and_shutdown_answers_requests_in_flight(graphs):
    x = rng_images(5, 2, 64)
    answers = {}
    with running_server([f"demo={DEMO}"], "--batch-window-ms", "3000", "--max-queue", "1") as server:
        def waiting_request() -> None:
            answers["first"] = post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, x))

        first = threading.Thread(target=waiting_request)
        first.start()
        time.sleep(1.0)  # the first request now waits in the queue for others to join it
        status, _, content = post(server, "/v2/models/demo/infer", demo_request(ZEROS))
        assert status == 503 and "the most it takes" in json.loads(content)["error"]

        server.process.send_signal(signal.SIGTERM)
        first.join(timeout=30)
        printed = server.printed()
        assert server.process.returncode == 0, printed
        assert printed.rstrip().endswith("stopped")
    status, headers, content = answers["first"]
    assert status == 200
    size = int(headers[HEADER_LENGTH.lower()])
    np.testing.assert_allclose(np.frombuffer(content[size:], "<f4").reshape(2, 10), graphs["demo"](x),
                               atol=1e-6)


# -- the command line -------------------------------------------------------------------

def test_serve_command_errors(capsys, monkeypatch):
    code, _, err = run(capsys, "serve", "missing.pnnx.param")
    assert code == 2 and "no such model file: missing.pnnx.param" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(capsys, "serve", str(DEMO), "--port", str(port))
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code, _, err = run(capsys, "serve", str(DEMO))
    assert code == 2 and "install them with: pip install starlette uvicorn" in err


def test_load_benchmark_prints_its_table(capsys):
    assert load_main(["--model", str(DEMO), "--clients", "1", "3", "--requests", "12", "--seconds", "10",
                      "--warmup", "2", "--batching", "on", "off", "--protocols", "http-json", "grpc"]) == 0
    table = capsys.readouterr().out
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        (f"| {clients}", protocol, batching) for clients in (1, 3) for protocol in ("http-json", "grpc")
        for batching in ("off", "on")]
    assert all(row[-2:] == ["12", "0 |"] for row in rows)


# -- the protocol's parsing, for datatypes the bundled models do not take --------------------

def test_integer_and_boolean_inputs():
    inputs = (TensorSpec("ids", "INT64", (-1, 4)), TensorSpec("mask", "BOOL", (-1, 4)))
    outputs = (TensorSpec("out", "FP32", (-1, 4)),)
    header = json.dumps({"inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [1, 4], "data": [[1, 2], [3, 2**40]]},
        {"name": "mask", "datatype": "BOOL", "shape": [1, 4], "parameters": {"binary_data_size": 4}},
    ]}).encode()
    request = parse_infer_request(header + b"\x01\x00\x02\x00", len(header), "m", inputs, outputs)
    assert request.inputs[0].dtype == np.int64 and request.inputs[0].tolist() == [[1, 2, 3, 2**40]]
    assert request.inputs[1].tolist() == [[True, False, True, False]]
    for data, message in (([1, 2, 3, 4.5], "does not hold INT64"), ([1, 2, 3, 2**70], "does not hold")):
        body = json.dumps({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 4], "data": data},
                                      {"name": "mask", "datatype": "BOOL", "shape": [1, 4],
                                       "data": [True] * 4}]}).encode()
        with pytest.raises(ProtocolError, match=message):
            parse_infer_request(body, None, "m", inputs, outputs)


def test_the_package_and_the_http_server_import_without_grpc_prometheus_and_ray():
    code = ("import sys\n"
            "for name in ('grpc', 'grpc_tools', 'prometheus_client', 'ray'):\n"
            "    sys.modules[name] = None\n"
            "import kuiperinfer, kuiperinfer.serve, kuiperinfer.serve.running, kuiperinfer.cli.serve\n"
            "from kuiperinfer.cli import main\n"
            "sys.exit(main(['serve', '--metrics-port', 'off']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert "gRPC needs grpcio and grpcio-tools (import of grpc halted; None in sys.modules); install them with: " \
           "pip install grpcio grpcio-tools, or serve without: --grpc-port off" in result.stderr


def test_the_listening_socket_is_tcp_so_that_answers_are_not_delayed():
    # asyncio turns Nagle's algorithm off only on IPPROTO_TCP sockets, else answers wait for ACKs.
    with _listen("127.0.0.1", 0) as listener:
        assert listener.proto == socket.IPPROTO_TCP


def test_serve_explains_itself(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "serve", "--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kuiper serve ") and "Examples:\n  kuiper serve" in out
    assert "--max-batch-size N" in out and "--batch-window-ms MS" in out


# -- the batcher, on stand-in graphs ------------------------------------------------------

class StandInGraph:
    """Doubles its input; fails on any sample holding -1; ``keeps_batch=False`` sums the batch."""

    def __init__(self, keeps_batch: bool = True):
        self.output_names = ["y"]
        self.keeps_batch = keeps_batch
        self.batching = Batching(keeps_batch, "" if keeps_batch else "sums the batch")
        self.batches: list[int] = []

    def run(self, x):
        self.batches.append(x.shape[0])
        if (x == -1).any():
            raise InferError("a sample holds -1", "double", "Stand.In")
        return [x * 2 if self.keeps_batch else (x * 2).sum(0, keepdims=True)]


def stand_in_batcher(graph: StandInGraph, window: float = 0.2) -> Batcher:
    inputs, outputs = (TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1, 2)),)
    return Batcher(ServedModel("stand-in", graph, inputs, outputs, Path("stand-in")),
                   max_batch_size=8, window=window)


def test_a_failing_sample_fails_only_its_own_request():
    graph = StandInGraph()

    async def scenario():
        batcher = stand_in_batcher(graph)
        batcher.start()
        good = np.ones((2, 2), np.float32)
        bad = np.array([[-1, 0]], np.float32)
        results = await asyncio.gather(batcher.infer((good,)), batcher.infer((bad,)),
                                       batcher.infer((good * 3,)), return_exceptions=True)
        await batcher.stop()
        return results

    first, second, third = asyncio.run(scenario())
    np.testing.assert_array_equal(first[0], np.full((2, 2), 2))
    assert isinstance(second, InferError) and "holds -1" in str(second)
    np.testing.assert_array_equal(third[0], np.full((2, 2), 6))
    assert graph.batches == [5, 2, 1, 2]  # joined, failed, then each alone


def test_a_model_whose_samples_mix_is_never_joined():
    graph = StandInGraph(keeps_batch=False)

    async def scenario():
        batcher = stand_in_batcher(graph)
        batcher.start()
        x = np.ones((1, 2), np.float32)
        first = await asyncio.gather(batcher.infer((x,)), batcher.infer((x,)))
        second = await asyncio.gather(batcher.infer((x,)), batcher.infer((x,)))
        await batcher.stop()
        return first + second

    results = asyncio.run(scenario())
    assert all(r[0].tolist() == [[2.0, 2.0]] for r in results)
    assert graph.batches == [1, 1, 1, 1]


def test_a_model_that_fails_gets_500_with_the_error_body():
    inputs, outputs = (TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1, 2)),)
    app = create_app([ServedModel("stand-in", StandInGraph(), inputs, outputs, Path("stand-in"))])
    with _listen("127.0.0.1", 0) as listener:
        server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]})
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.01)
            address = Server("127.0.0.1", listener.getsockname()[1], None, [], None)
            body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                           "data": [-1, 0]}]}).encode()
            status, _, content = post(address, "/v2/models/stand-in/infer", body)
            assert status == 500 and "the model failed: " in json.loads(content)["error"]
            body = body.replace(b"-1", b"5")
            status, _, content = post(address, "/v2/models/stand-in/infer", body)
            assert status == 200, content
            assert json.loads(content)["outputs"][0]["data"] == [10.0, 0.0]
        finally:
            server.should_exit = True
            thread.join(timeout=30)


# -- clients' data kept apart ------------------------------------------------------------

@pytest.fixture(scope="module")
def batch_models(tmp_path_factory):
    """Two models whose outputs mix the samples of a batch, and one whose samples stay apart."""
    functions = {"softmax-over-batch": lambda x: torch.softmax(x, 0), "centred": lambda x: x - x.mean(0, keepdim=True),
                 "doubled": lambda x: torch.relu(x) * 2}
    return {name: export(Lambda(fn), [torch.rand(2, 3)], tmp_path_factory.mktemp(name))
            for name, fn in functions.items()}


def infer_row(server, model: str, row: np.ndarray) -> np.ndarray:
    """One request over plain HTTP (tritonclient's connections stay in the thread that made them)."""
    body = json.dumps({"inputs": [{"name": DEMO_INPUT, "datatype": "FP32", "shape": list(row.shape),
                                   "data": row.ravel().tolist()}]}).encode()
    status, _, content = post(server, f"/v2/models/{model}/infer", body)
    assert status == 200, content
    output = json.loads(content)["outputs"][0]
    return np.array(output["data"], np.float32).reshape(output["shape"])


def test_requests_at_once_get_their_own_numbers(batch_models):
    """Four clients send one row each at once, 24 times: joined by the batcher, a model that
    mixes samples would answer each with numbers computed from the others' rows."""
    alone = {name: kuiperinfer.load(param) for name, param in batch_models.items()}
    with running_server([f"{name}={param}" for name, param in batch_models.items()]) as server:
        client = triton.InferenceServerClient(f"{server.host}:{server.port}")
        try:
            for name, graph in alone.items():
                joins = name == "doubled"
                assert client.get_model_config(name)["max_batch_size"] == (8 if joins else 0)
                assert client.get_model_metadata(name)["max_batch_size"] == (8 if joins else 0)
                rows = np.random.default_rng(0).standard_normal((24, 4, 1, 3)).astype(np.float32)
                with ThreadPoolExecutor(4) as pool:
                    for round_rows in rows:
                        answers = pool.map(infer_row, [server] * 4, [name] * 4, round_rows)
                        for row, answer in zip(round_rows, answers):
                            np.testing.assert_allclose(answer, graph(row), atol=1e-6)
                stats = client.get_inference_statistics(name)["model_stats"][0]
                assert (int(stats["execution_count"]) < 96) == joins
        finally:
            client.close()
    assert server.printed().count("requests run one at a time") == 2
