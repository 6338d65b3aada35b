"""`kuiper serve --model-repository`: the folder layout, and loading and unloading models while
the server runs, over HTTP (tritonclient.http) and gRPC (tritonclient.grpc).

The repository starts with the demo CNN, a hand-written model that doubles its input (with a
config.json), and a folder whose model file is not a model: it must be reported unavailable
with the reason while the others serve.
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton
from cli_runner import DEMO, run
from handmade import write_model
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import kuiperinfer
from benchmarks.serve_load import binary_request, running_server
from kuiperinfer.serve.repository import ModelRepository, RepositoryError

DEMO_INPUT, DEMO_OUTPUT = "pnnx_input_0", "12"


def scaling(factor: int) -> str:
    return ("7767517\n3 2\n"
            "pnnx.Input               in                       0 1 0 #0=(1,4)f32\n"
            f"pnnx.Expression          scale                    1 1 0 1 expr=mul(@0,{factor}) #0=(1,4)f32 #1=(1,4)f32\n"
            "pnnx.Output              out                      1 0 1 #1=(1,4)f32\n")


def add_demo(folder: Path) -> None:
    folder.mkdir()
    shutil.copy(DEMO, folder / DEMO.name)
    shutil.copy(DEMO.with_suffix("").with_suffix(".pnnx.bin"), folder / "demo_cnn.pnnx.bin")


@pytest.fixture
def repository(tmp_path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    add_demo(root / "demo")
    (root / "scale").mkdir()
    write_model(root / "scale", scaling(2), {}, name="scale")
    (root / "scale" / "config.json").write_text(json.dumps({"max_batch_size": 2}))
    (root / "broken").mkdir()
    (root / "broken" / "broken.pnnx.param").write_text("7767517\nnot a model\n")
    return root


def images(seed: int, batch: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 64, 64)).astype(np.float32)


def demo_request(x: np.ndarray) -> triton.InferInput:
    request = triton.InferInput(DEMO_INPUT, list(x.shape), "FP32")
    request.set_data_from_numpy(x, binary_data=True)
    return request


def post(server, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def pending(server) -> float:
    """The demo model's requests queued now, from the metrics."""
    text = urllib.request.urlopen(f"http://{server.host}:{server.metrics_port}/metrics", timeout=30).read().decode()
    return next(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == "nv_inference_pending_request_count" and sample.labels["model"] == "demo")


def states(index: list[dict]) -> dict[str, tuple]:
    return {entry["name"]: (entry.get("state", ""), entry.get("reason", "")) for entry in index}


def test_a_model_that_fails_to_load_is_unavailable_with_its_reason_and_the_others_serve(repository):
    graph = kuiperinfer.load(DEMO)
    with running_server(["--model-repository", str(repository)], ready=False) as server:
        http_client = triton.InferenceServerClient(f"{server.host}:{server.port}")
        grpc_client = triton_grpc.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        try:
            index = http_client.get_model_repository_index()
            found = states(index)
            assert found["demo"] == ("READY", "") and found["scale"] == ("READY", "")
            assert found["broken"][0] == "UNAVAILABLE" and "broken.pnnx.param" in found["broken"][1]
            assert states(grpc_client.get_model_repository_index(as_json=True)["models"]) == found
            assert states(http_client.get_model_repository_index()) == found
            ready_only = json.loads(post(server, "/v2/repository/index", b'{"ready": true}')[1])
            assert sorted(entry["name"] for entry in ready_only) == ["demo", "scale"]

            assert http_client.is_server_live() and not http_client.is_server_ready()   # strict, as Triton's
            assert not http_client.is_model_ready("broken") and http_client.is_model_ready("demo")
            x = images(0, 2)
            np.testing.assert_allclose(http_client.infer("demo", [demo_request(x)]).as_numpy(DEMO_OUTPUT), graph(x),
                                       atol=1e-6)
            with pytest.raises(InferenceServerException) as raised:
                http_client.infer("broken", [demo_request(x)])
            assert raised.value.status() == "503" and "model 'broken' is not available: " in raised.value.message()
            with pytest.raises(InferenceServerException) as raised:
                grpc_client.get_model_metadata("broken")
            assert raised.value.status() == "StatusCode.UNAVAILABLE"
            assert http_client.get_model_config("scale")["max_batch_size"] == 2   # from its config.json

            # loading it as it is fails again, with the reason; once its folder is fixed, it serves
            with pytest.raises(InferenceServerException, match="failed to load model 'broken': ") as raised:
                http_client.load_model("broken")
            assert raised.value.status() == "400"
            (repository / "broken" / "broken.pnnx.param").unlink()
            shutil.copy(DEMO, repository / "broken" / "fixed.pnnx.param")
            shutil.copy(DEMO.with_suffix("").with_suffix(".pnnx.bin"), repository / "broken" / "fixed.pnnx.bin")
            grpc_client.load_model("broken")
            assert states(http_client.get_model_repository_index())["broken"] == ("READY", "")
            assert http_client.is_server_ready()
            np.testing.assert_allclose(grpc_client.infer("broken", [grpc_input(x)]).as_numpy(DEMO_OUTPUT), graph(x),
                                       atol=1e-6)
        finally:
            http_client.close()
            grpc_client.close()
    printed = server.printed()
    assert "model broken is unavailable: " in printed and "Traceback" not in printed


def grpc_input(x: np.ndarray) -> triton_grpc.InferInput:
    request = triton_grpc.InferInput(DEMO_INPUT, list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    return request


def test_unloading_answers_the_requests_in_flight_then_refuses(repository):
    shutil.rmtree(repository / "broken")
    graph = kuiperinfer.load(DEMO)
    with running_server(["--model-repository", str(repository), "--batch-window-ms", "1500"]) as server:
        answers = {}

        def send(seed: int) -> None:
            answers[seed] = post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, images(seed)))

        senders = [threading.Thread(target=send, args=(seed,)) for seed in range(3)]
        for sender in senders:
            sender.start()
        deadline = time.monotonic() + 60
        while pending(server) < 3:   # the three wait in the queue for others to join them
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert post(server, "/v2/repository/models/demo/unload") == (200, b"")
        for sender in senders:
            sender.join()
        for seed, (status, body) in answers.items():   # answered, not refused
            assert status == 200, body
            np.testing.assert_allclose(np.frombuffer(body[-40:], "<f4").reshape(1, 10), graph(images(seed)), atol=1e-6)

        status, body = post(server, "/v2/models/demo/infer", *binary_request(DEMO_INPUT, images(5)))
        assert status == 503 and json.loads(body)["error"] == "model 'demo' is not available: unloaded"
        grpc_client = triton_grpc.InferenceServerClient(f"{server.host}:{server.grpc_port}")
        try:
            with pytest.raises(InferenceServerException) as raised:
                grpc_client.infer("demo", [grpc_input(images(5))])
            assert raised.value.status() == "StatusCode.UNAVAILABLE" and "unloaded" in raised.value.message()
            assert states(grpc_client.get_model_repository_index(as_json=True)["models"])["demo"] == \
                ("UNAVAILABLE", "unloaded")
            # the two refused requests count as failures (REJECTED in the metrics); the three answered
            stats = grpc_client.get_inference_statistics("demo", as_json=True)["model_stats"][0]["inference_stats"]
            assert (int(stats["fail"]["count"]), int(stats["success"]["count"])) == (2, 3)
            assert grpc_client.is_server_ready()   # a model unloaded on request does not count
            grpc_client.unload_model("demo")       # unloading it again does nothing
            grpc_client.load_model("demo")
            np.testing.assert_allclose(grpc_client.infer("demo", [grpc_input(images(6))]).as_numpy(DEMO_OUTPUT),
                                       graph(images(6)), atol=1e-6)
        finally:
            grpc_client.close()


def test_loading_again_serves_the_new_files_and_new_folders(repository):
    shutil.rmtree(repository / "broken")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with running_server(["--model-repository", str(repository)]) as server:
        client = triton.InferenceServerClient(f"{server.host}:{server.port}")
        try:
            def scaled(model: str) -> np.ndarray:
                request = triton.InferInput("in", [2, 4], "FP32")
                request.set_data_from_numpy(x)
                return client.infer(model, [request]).as_numpy("1")

            np.testing.assert_array_equal(scaled("scale"), x * 2)
            write_model(repository / "scale", scaling(3), {}, name="scale")
            client.load_model("scale")
            np.testing.assert_array_equal(scaled("scale"), x * 3)

            (repository / "fresh").mkdir()
            write_model(repository / "fresh", scaling(5), {}, name="model")
            assert {"name": "fresh"} in client.get_model_repository_index()
            client.load_model("fresh")
            np.testing.assert_array_equal(scaled("fresh"), x * 5)

            with pytest.raises(InferenceServerException, match="no model 'nowhere' on this server") as raised:
                client.load_model("nowhere")
            assert raised.value.status() == "404"
            with pytest.raises(InferenceServerException, match="unknown model 'nowhere'") as raised:
                client.unload_model("nowhere")
            assert raised.value.status() == "404"
            (repository / "fresh" / "config.json").write_text('{"precision": "fp32", "max_batch": 4}')
            with pytest.raises(InferenceServerException, match="unknown key 'max_batch'"):
                client.load_model("fresh")
            np.testing.assert_array_equal(scaled("fresh"), x * 5)   # a failed reload leaves it serving
        finally:
            client.close()


def test_the_folder_layout_is_checked(tmp_path):
    with pytest.raises(RepositoryError, match="is not a folder"):
        ModelRepository(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    (tmp_path / "two").mkdir()
    write_model(tmp_path / "two", scaling(2), {}, name="a")
    write_model(tmp_path / "two", scaling(2), {}, name="b")
    (tmp_path / "configured").mkdir()
    write_model(tmp_path / "configured", scaling(2), {}, name="m")
    (tmp_path / ".hidden").mkdir()
    repository = ModelRepository(tmp_path)
    assert repository.names() == ["configured", "empty", "two"]
    with pytest.raises(RepositoryError, match="must hold one model file .*; found none"):
        repository.source("empty")
    with pytest.raises(RepositoryError, match="found a.pnnx.param, b.pnnx.param"):
        repository.source("two")
    with pytest.raises(RepositoryError, match="no folder 'nowhere'"):
        repository.source("nowhere")
    config = tmp_path / "configured" / "config.json"
    for text, message in (("[1]", "not a JSON object"), ('{"max_batch_size": "4"}', "must be a whole number"),
                          ('{"max_batch_size": 0}', "at least 1"), ('{"calibration": "../x.table"}', "names a file"),
                          ('{"calibration": "m.table"}', "no calibration file m.table")):
        config.write_text(text)
        with pytest.raises(RepositoryError, match=message):
            repository.source("configured")
    (tmp_path / "configured" / "m.table").write_text("")
    config.write_text('{"precision": "int8", "calibration": "m.table", "max_batch_size": 4}')
    source = repository.source("configured")
    assert (source.name, source.path.name, source.precision, source.calibration.name, source.max_batch_size) == \
        ("configured", "m.pnnx.param", "int8", "m.table", 4)


def test_the_command_names_a_missing_repository_and_a_name_given_twice(capsys, tmp_path):
    code, _, err = run(capsys, "serve", "--model-repository", str(tmp_path / "none"))
    assert code == 2 and "is not a folder" in err
    add_demo(tmp_path / "demo")
    code, _, err = run(capsys, "serve", f"demo={DEMO}", "--model-repository", str(tmp_path), "--port", "0",
                       "--grpc-port", "off", "--metrics-port", "off")
    assert code == 2 and "two models have the same name: demo" in err
