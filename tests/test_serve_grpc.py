"""`kuiper serve`'s gRPC endpoint, tested with Triton's own client (tritonclient.grpc).

The server runs as users run it, in a subprocess on free loopback ports, serving the tiny
demo CNN and the bundled EfficientNet-Lite0 over HTTP and gRPC at once. What tritonclient
does not send (typed contents of every kind, malformed messages, random bytes) is sent through
a plain grpc channel, built with tritonclient's copy of the protocol's messages: a second,
independent reading of the .proto.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from cli_runner import DEMO, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import DEMO_INPUT, DEMO_OUTPUT, NET_INPUT, NET_OUTPUT, local_graphs, serving_both
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

import kuiperinfer
from benchmarks.serve_load import running_server
from kuiperinfer.models import sample_images
from kuiperinfer.vision.preprocess import EFFICIENTNET_LITE

INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def server():
    """The server every test shares."""
    with serving_both("--max-body-mb", "4") as running:
        yield running


@pytest.fixture(scope="module")
def graphs():
    return local_graphs()


@pytest.fixture
def client(server):
    connection = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(f"{server.host}:{server.grpc_port}") as opened:
        yield opened


def rng_images(seed: int, batch: int, size: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)


def demo_input(x: np.ndarray) -> triton.InferInput:
    request = triton.InferInput(DEMO_INPUT, list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    return request


def call(channel, request: service_pb2.ModelInferRequest | bytes) -> service_pb2.ModelInferResponse:
    """ModelInfer with a message (or raw bytes) tritonclient would not send."""
    data = request if isinstance(request, bytes) else request.SerializeToString()
    answer = channel.unary_unary(INFER)(data, timeout=60)
    return service_pb2.ModelInferResponse.FromString(answer)


def demo_message(x: np.ndarray, raw: bool = True) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="demo")
    tensor = request.inputs.add(name=DEMO_INPUT, datatype="FP32", shape=list(x.shape))
    if raw:
        request.raw_input_contents.append(x.astype("<f4").tobytes())
    else:
        tensor.contents.fp32_contents.extend(x.ravel().tolist())
    return request


def output_of(response: service_pb2.ModelInferResponse, index: int = 0) -> np.ndarray:
    tensor = response.outputs[index]
    return np.frombuffer(response.raw_output_contents[index], "<f4").reshape(tensor.shape)


def assert_serving(client, graphs) -> None:
    """A good request still gets the right answer."""
    x = rng_images(99, 1)
    np.testing.assert_allclose(client.infer("demo", [demo_input(x)]).as_numpy(DEMO_OUTPUT), graphs["demo"](x),
                               atol=1e-6)


# -- health and metadata ----------------------------------------------------------------------

def test_health_metadata_and_configuration(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("demo") and client.is_model_ready("efficientnet", "1")
    assert not client.is_model_ready("resnet")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "kuiperinfer" and metadata["version"] == kuiperinfer.__version__
    assert {"binary_tensor_data", "model_repository", "statistics"} <= set(metadata["extensions"])
    model = client.get_model_metadata("efficientnet")
    assert (model.name, list(model.versions), model.platform) == ("efficientnet", ["1"], "kuiperinfer_pnnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [(NET_INPUT, "FP32", [-1, 3, 224, 224])]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [(NET_OUTPUT, "FP32", [-1, 1000])]
    config = client.get_model_config("demo").config
    assert (config.name, config.max_batch_size, config.backend) == ("demo", 8, "kuiperinfer")
    assert [(t.name, triton.model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == \
        [(DEMO_INPUT, "TYPE_FP32", [3, 64, 64])]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000


def test_grpc_and_http_give_the_same_metadata(server, client):
    http = triton_http.InferenceServerClient(f"{server.host}:{server.port}")
    try:
        for name in ("demo", "efficientnet"):
            over_http = http.get_model_metadata(name)
            over_grpc = client.get_model_metadata(name, as_json=True)
            for tensors in ("inputs", "outputs"):
                assert [{**t, "shape": [int(d) for d in t["shape"]]} for t in over_grpc[tensors]] == over_http[tensors]
            config = client.get_model_config(name, as_json=True)["config"]
            assert config["max_batch_size"] == http.get_model_config(name)["max_batch_size"]
    finally:
        http.close()


def test_unknown_models_and_versions_are_not_found(client):
    for call_with in (lambda: client.get_model_metadata("resnet"), lambda: client.get_model_config("resnet"),
                      lambda: client.get_model_metadata("demo", "2"),
                      lambda: client.infer("resnet", [demo_input(rng_images(0, 1))])):
        with pytest.raises(InferenceServerException) as raised:
            call_with()
        assert raised.value.status() == "StatusCode.NOT_FOUND"
        assert "unknown model 'resnet'" in raised.value.message() or "version 1 only" in raised.value.message()


# -- inference ------------------------------------------------------------------------------

def test_infer_matches_the_engine(client, graphs):
    x = rng_images(1, 3)
    result = client.infer("demo", [demo_input(x)], request_id="req-9",
                          outputs=[triton.InferRequestedOutput(DEMO_OUTPUT)])
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("req-9", "demo", "1")
    np.testing.assert_allclose(result.as_numpy(DEMO_OUTPUT), graphs["demo"](x), atol=1e-6)


def test_efficientnet_classifies_the_bundled_photos(client, graphs):
    images = EFFICIENTNET_LITE.batch(sample_images())
    request = triton.InferInput(NET_INPUT, list(images.shape), "FP32")
    request.set_data_from_numpy(images)
    logits = client.infer("efficientnet", [request]).as_numpy(NET_OUTPUT)
    expected = graphs["efficientnet"](images)
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    assert logits.argmax(1).tolist() == expected.argmax(1).tolist() == [817, 404]


def test_typed_contents_give_what_raw_contents_give(channel, graphs):
    x = rng_images(2, 2)
    raw = output_of(call(channel, demo_message(x, raw=True)))
    typed = output_of(call(channel, demo_message(x, raw=False)))
    np.testing.assert_array_equal(raw, typed)
    np.testing.assert_allclose(raw, graphs["demo"](x), atol=1e-6)


def test_requests_over_grpc_and_http_at_once_are_joined_and_split_back(server, graphs):
    """Both front ends feed one batcher: concurrent requests from both come back right, in
    fewer runs than requests."""
    def stats() -> dict:
        client = triton_http.InferenceServerClient(f"{server.host}:{server.port}")
        try:
            return client.get_inference_statistics("demo")["model_stats"][0]
        finally:
            client.close()

    def over_grpc(seed: int) -> tuple[np.ndarray, np.ndarray]:
        client = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        try:
            x = rng_images(seed, 1 + seed % 3)
            return x, client.infer("demo", [demo_input(x)]).as_numpy(DEMO_OUTPUT)
        finally:
            client.close()

    def over_http(seed: int) -> tuple[np.ndarray, np.ndarray]:
        client = triton_http.InferenceServerClient(f"{server.host}:{server.port}")
        try:
            x = rng_images(seed, 1 + seed % 2)
            request = triton_http.InferInput(DEMO_INPUT, list(x.shape), "FP32")
            request.set_data_from_numpy(x, binary_data=True)
            return x, client.infer("demo", [request]).as_numpy(DEMO_OUTPUT)
        finally:
            client.close()

    before = stats()
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda seed: (over_grpc if seed % 2 else over_http)(seed), range(100, 136)))
    after = stats()
    for x, answer in answers:
        np.testing.assert_allclose(answer, graphs["demo"](x), atol=1e-6)
    samples = sum(x.shape[0] for x, _ in answers)
    assert int(after["inference_count"]) - int(before["inference_count"]) == samples
    assert int(after["execution_count"]) - int(before["execution_count"]) < len(answers)


# -- bad requests -----------------------------------------------------------------------------

def test_bad_requests_through_the_client_are_invalid_arguments(client, graphs):
    x = rng_images(3, 1)
    cases = [
        (triton.InferInput(DEMO_INPUT, [1, 3, 32, 32], "FP32"), x[:, :, :32, :32], "has shape [1, 3, 32, 32]"),
        (triton.InferInput(DEMO_INPUT, list(x.shape), "FP64"), x.astype(np.float64), "expects FP32"),
        (triton.InferInput("image", list(x.shape), "FP32"), x, "unexpected inference input 'image'"),
        (triton.InferInput(DEMO_INPUT, list(x.shape), "INT64"), x.astype(np.int64), "expects FP32"),
    ]
    for request, data, message in cases:
        request.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as raised:
            client.infer("demo", [request])
        assert raised.value.status() == "StatusCode.INVALID_ARGUMENT" and message in raised.value.message()
    with pytest.raises(InferenceServerException, match="unexpected inference output 'logits'") as raised:
        client.infer("demo", [demo_input(x)], outputs=[triton.InferRequestedOutput("logits")])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert_serving(client, graphs)


def fp32_shaped(shape: list[int]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="demo")
    request.inputs.add(name=DEMO_INPUT, datatype="FP32", shape=shape)
    return request


def with_raw(request: service_pb2.ModelInferRequest, *contents: bytes) -> service_pb2.ModelInferRequest:
    request.raw_input_contents.extend(contents)
    return request


def typed(request: service_pb2.ModelInferRequest, field: str, values: list) -> service_pb2.ModelInferRequest:
    getattr(request.inputs[0].contents, field).extend(values)
    return request


ZEROS = bytes(4 * 3 * 64 * 64)


BAD_MESSAGES = [
    (fp32_shaped([1, 3, 64, 64]), "needs 12288 values, contents.fp32_contents has 0"),
    (service_pb2.ModelInferRequest(model_name="demo"), "non-empty list of 'inputs'"),
    (with_raw(fp32_shaped([1, 3, 64, 64]), ZEROS[:-4]), "takes 49152 bytes, raw_input_contents[0] has 49148"),
    (with_raw(fp32_shaped([1, 3, 64, 64]), ZEROS, ZEROS), "2 raw_input_contents for 1 inputs"),
    (with_raw(fp32_shaped([0, 3, 64, 64]), b""), "has shape [0, 3, 64, 64]"),
    (with_raw(fp32_shaped([2 ** 40, 3, 64, 64]), ZEROS), "takes 54043195528445952 bytes"),
    (with_raw(fp32_shaped([-1, 3, 64, 64]), ZEROS), "has shape [-1, 3, 64, 64]"),
    (typed(fp32_shaped([1, 3, 64, 64]), "int_contents", [0] * 12288), "takes its values in contents.fp32_contents, not int_contents"),
    (typed(fp32_shaped([1, 3, 64, 64]), "fp32_contents", [0.0] * 12287), "needs 12288 values, contents.fp32_contents has 12287"),
    (typed(with_raw(fp32_shaped([1, 3, 64, 64]), ZEROS), "fp32_contents", [0.0]), "has contents and the request has raw_input_contents"),
]


@pytest.mark.parametrize("request_message, message", BAD_MESSAGES)
def test_bad_messages_are_invalid_arguments_with_our_messages(channel, request_message, message):
    with pytest.raises(grpc.RpcError) as raised:
        call(channel, request_message)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in raised.value.details()


def test_a_message_that_does_not_parse_is_an_invalid_argument(channel):
    for garbage in (b"\xff\xff\xff\xff", b"\x0a\x80\x80\x80\x80\x10abc", bytes(range(256))):
        with pytest.raises(grpc.RpcError) as raised:
            call(channel, garbage)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "the request is not a ModelInferRequest" in raised.value.details()


def test_a_message_over_the_size_limit_is_refused(channel, client, graphs):
    big = with_raw(fp32_shaped([90, 3, 64, 64]), bytes(4 * 90 * 3 * 64 * 64))   # 4.2 MiB, the limit is 4
    with pytest.raises(grpc.RpcError) as raised:
        call(channel, big)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serving(client, graphs)


# -- hostile requests, fuzzed ----------------------------------------------------------------

DATATYPES = ["FP32", "FP64", "FP16", "BF16", "INT8", "INT32", "INT64", "UINT8", "BOOL", "BYTES", "", "fp32", "FLOAT"]
CONTENT_FIELDS = {"bool_contents": st.booleans(), "int_contents": st.integers(-2**31, 2**31 - 1),
                  "int64_contents": st.integers(-2**63, 2**63 - 1), "uint_contents": st.integers(0, 2**32 - 1),
                  "fp32_contents": st.floats(width=32), "fp64_contents": st.floats(),
                  "bytes_contents": st.binary(max_size=8)}


@st.composite
def hostile_requests(draw) -> bytes:
    """A ModelInferRequest for the demo model with some of its parts wrong, or its bytes damaged."""
    request = service_pb2.ModelInferRequest(model_name=draw(st.sampled_from(["demo", "demo", "", "efficientnet", "x"])),
                                            model_version=draw(st.sampled_from(["", "1", "2"])),
                                            id=draw(st.text(max_size=5)))
    for _ in range(draw(st.integers(0, 3))):
        shape = draw(st.one_of(st.just([1, 3, 64, 64]), st.lists(st.integers(-2, 2**62), max_size=5),
                               st.lists(st.integers(1, 4), min_size=4, max_size=4)))
        tensor = request.inputs.add(name=draw(st.sampled_from([DEMO_INPUT, DEMO_INPUT, "x", ""])),
                                    datatype=draw(st.sampled_from(DATATYPES)), shape=shape)
        if draw(st.booleans()):
            field = draw(st.sampled_from(sorted(CONTENT_FIELDS)))
            getattr(tensor.contents, field).extend(draw(st.lists(CONTENT_FIELDS[field], max_size=20)))
        if draw(st.booleans()):
            tensor.parameters["binary_data_size"].int64_param = draw(st.integers(-5, 10**6))
    for _ in range(draw(st.integers(0, 3))):
        size = draw(st.sampled_from([0, 4, 49152, 49148, 49156, 98304]))
        request.raw_input_contents.append(draw(st.binary(min_size=min(size, 16), max_size=16)) * (size // 16)
                                          if size > 16 else bytes(size))
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(st.sampled_from([DEMO_OUTPUT, "logits", ""])))
        if draw(st.booleans()):
            output.parameters["classification"].int64_param = 3
    data = request.SerializeToString()
    if draw(st.integers(0, 4)) == 0:   # damaged bytes
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=12)) + data[cut + draw(st.integers(0, 8)):]
    return data


ACCEPTABLE = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=hostile_requests())
def test_hostile_requests_get_errors_and_never_crash_the_server(channel, data):
    try:
        response = call(channel, data)
    except grpc.RpcError as error:
        assert error.code() in ACCEPTABLE, (error.code(), error.details())
        assert error.details()
        return
    assert response.model_name == "demo" and len(response.raw_output_contents) == len(response.outputs) >= 1


def test_hostile_requests_beside_good_ones_never_get_or_give_another_clients_numbers(server, graphs):
    """Good clients' answers stay theirs while hostile requests arrive between them."""
    failures = []
    rng = np.random.default_rng(7)
    hostile = []
    for request, _ in BAD_MESSAGES * 6:   # each bad message as it is, or with some bytes changed
        data = bytearray(request.SerializeToString())
        for _ in range(rng.integers(0, 3)):
            data[rng.integers(len(data))] = rng.integers(256)
        hostile.append(bytes(data))

    def good(seed: int) -> None:
        client = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        try:
            for round_number in range(4):
                x = rng_images(1000 + seed * 10 + round_number, 1 + seed % 2)
                np.testing.assert_allclose(client.infer("demo", [demo_input(x)]).as_numpy(DEMO_OUTPUT),
                                           graphs["demo"](x), atol=1e-6)
        except Exception as exc:  # noqa: BLE001  (reported by the main thread below)
            failures.append(exc)
        finally:
            client.close()

    def bad(part: int) -> None:
        with grpc.insecure_channel(f"{server.host}:{server.grpc_port}") as own:
            for data in hostile[part::4]:
                try:
                    response = call(own, data)
                except grpc.RpcError as error:
                    if error.code() not in ACCEPTABLE:
                        failures.append(AssertionError(f"{error.code()}: {error.details()}"))
                else:   # a changed byte may leave a valid request, answered in full
                    if len(response.raw_output_contents) != len(response.outputs) or not response.outputs:
                        failures.append(AssertionError(f"an answer without its outputs: {response}"))

    threads = [threading.Thread(target=good, args=(seed,)) for seed in range(6)]
    threads += [threading.Thread(target=bad, args=(part,)) for part in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


# -- stopping -------------------------------------------------------------------------------

def test_sigterm_answers_the_grpc_requests_in_flight_and_refuses_new_ones(graphs):
    x = rng_images(5, 2)
    answers = {}
    with running_server([f"demo={DEMO}"], "--batch-window-ms", "3000") as server:
        def waiting_request() -> None:
            client = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
            try:
                answers["first"] = client.infer("demo", [demo_input(x)]).as_numpy(DEMO_OUTPUT)
            finally:
                client.close()

        first = threading.Thread(target=waiting_request)
        first.start()
        time.sleep(1.0)   # the request now waits in the queue for others to join it
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        late = triton.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        with pytest.raises(InferenceServerException) as raised:
            late.infer("demo", [demo_input(x)], client_timeout=10)
        assert raised.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
        late.close()
        first.join(timeout=30)
        printed = server.printed()
        assert server.process.returncode == 0, printed
        assert printed.rstrip().endswith("stopped")
    np.testing.assert_allclose(answers["first"], graphs["demo"](x), atol=1e-6)


# -- the command line -----------------------------------------------------------------------

def test_a_grpc_port_in_use_is_one_clear_error(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(capsys, "serve", str(DEMO), "--port", "0", "--metrics-port", "off", "--grpc-port", str(port))
    assert code == 2 and f"cannot listen on 127.0.0.1:{port} for gRPC" in err


def test_serving_without_grpcio_names_what_to_install(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "grpc", None)
    monkeypatch.delitem(sys.modules, "kuiperinfer.serve.rpc", raising=False)
    code, _, err = run(capsys, "serve", str(DEMO))
    assert code == 2 and "pip install grpcio grpcio-tools, or serve without: --grpc-port off" in err
