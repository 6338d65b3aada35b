"""kuiperinfer.vision without the bundled model: image loading, preprocessing, labels, Classifier."""

import math

import numpy as np
import pytest
import torch
from oracle import export
from PIL import Image, ImageOps

from kuiperinfer.errors import KuiperError, ModelFormatError
from kuiperinfer.vision import (
    EFFICIENTNET_LITE,
    Classifier,
    ImageError,
    Preprocess,
    center_crop,
    find_images,
    imagenet_labels,
    load_image,
    load_labels,
    resize_shorter_side,
    softmax,
)

RNG = np.random.default_rng(0)


def photo(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """A random picture (smooth enough that resampling filters differ from each other)."""
    base = RNG.integers(0, 256, (max(height // 8, 1), max(width // 8, 1), 3), dtype=np.uint8)
    return Image.fromarray(base).resize((width, height), Image.Resampling.BILINEAR).convert(mode)


def reference_transform(image: Image.Image, size: int, resize: int, mean, std,
                        resample: Image.Resampling) -> np.ndarray:
    """torchvision's Resize(resize) + CenterCrop(size) + ToTensor + Normalize, by hand with PIL
    and torch: the transform kuiperinfer's Preprocess must equal."""
    image = ImageOps.exif_transpose(image).convert("RGB")
    w, h = image.size
    new_size = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
    image = image.resize(new_size, resample)
    left, top = int(round((new_size[0] - size) / 2.0)), int(round((new_size[1] - size) / 2.0))
    image = image.crop((left, top, left + size, top + size))
    tensor = torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div(255)
    mean, std = torch.tensor(mean), torch.tensor(std)
    return ((tensor - mean[:, None, None]) / std[:, None, None]).numpy()


# -- load_image ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "CMYK", "LA", "1"])
def test_load_image_gives_rgb(mode, tmp_path):
    path = tmp_path / ("x.tif" if mode == "CMYK" else "x.png")
    photo(20, 12, mode).save(path)
    image = load_image(path)
    assert image.mode == "RGB" and image.size == (20, 12)


def test_load_image_scales_16_bit_greyscale(tmp_path):
    values = np.array([[0, 256, 32768, 65535]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")
    pixels = np.asarray(load_image(tmp_path / "deep.png"))
    assert pixels[0, :, 0].tolist() == [0, 1, 128, 255]


@pytest.mark.parametrize("orientation, turn", [(1, 0), (3, 2), (6, -1), (8, 1)])
def test_load_image_applies_exif_orientation(orientation, turn, tmp_path):
    stored = photo(16, 10)
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored.save(tmp_path / "turned.png", exif=exif)
    upright = np.asarray(load_image(tmp_path / "turned.png"))
    np.testing.assert_array_equal(upright, np.rot90(np.asarray(stored), turn))


def test_load_image_takes_a_pillow_image_without_changing_it():
    original = photo(8, 8, "L")
    assert load_image(original).mode == "RGB" and original.mode == "L"


@pytest.mark.parametrize("content, message", [(None, "no such file"), (b"not an image", "cannot read"),
                                              ("truncated", "cannot read")])
def test_load_image_errors_name_the_file(content, message, tmp_path):
    path = tmp_path / "broken.jpg"
    if content == "truncated":
        photo(64, 64).save(path, quality=90)
        path.write_bytes(path.read_bytes()[:300])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageError, match=message) as info:
        load_image(path)
    assert str(path) in str(info.value) and isinstance(info.value, KuiperError)


def test_load_image_of_a_directory(tmp_path):
    with pytest.raises(ImageError, match="directory"):
        load_image(tmp_path)


def test_find_images_expands_folders_and_keeps_files(tmp_path):
    for name in ["b.JPG", "a.png", "notes.txt", "c.jpeg"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.jpg").write_bytes(b"")
    found = find_images([tmp_path, tmp_path / "notes.txt"])
    assert [p.name for p in found] == ["a.png", "b.JPG", "c.jpeg", "notes.txt"]
    with pytest.raises(ImageError, match="no such file"):
        find_images([tmp_path / "missing.jpg"])


# -- preprocessing ---------------------------------------------------------------------

@pytest.mark.parametrize("width, height", [(1200, 678), (810, 1080), (300, 300), (97, 131), (640, 425)])
@pytest.mark.parametrize("interpolation, resample", [("bilinear", Image.Resampling.BILINEAR),
                                                     ("bicubic", Image.Resampling.BICUBIC)])
def test_preprocess_equals_the_torchvision_transform(width, height, interpolation, resample):
    image = photo(width, height)
    preprocess = Preprocess(size=224, interpolation=interpolation)
    ours = preprocess(image)
    expected = reference_transform(image, 224, 256, preprocess.mean, preprocess.std, resample)
    assert ours.dtype == np.float32 and ours.shape == (3, 224, 224) and ours.flags.c_contiguous
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("size, resize", [(224, 256), (64, 64), (33, 47), (240, None)])
def test_preprocess_sizes_and_the_efficientnet_lite_settings(size, resize, tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6
    photo(150, 90).save(tmp_path / "p.png", exif=exif)
    preprocess = Preprocess(size, resize, mean=(127 / 255,) * 3, std=(128 / 255,) * 3,
                            interpolation="bicubic")
    expected = reference_transform(Image.open(tmp_path / "p.png"), size, preprocess.resize,
                                   preprocess.mean, preprocess.std, Image.Resampling.BICUBIC)
    np.testing.assert_allclose(preprocess(tmp_path / "p.png"), expected, rtol=0, atol=1e-6)
    assert EFFICIENTNET_LITE == Preprocess(224, 256, (127 / 255,) * 3, (128 / 255,) * 3, "bicubic")


def test_efficientnet_lite_maps_pixels_to_inception_range():
    grey = Image.new("RGB", (300, 300), (127, 255, 0))
    values = EFFICIENTNET_LITE(grey)
    np.testing.assert_allclose(values[:, 0, 0], [0.0, 1.0, -127 / 128], atol=1e-6)


def test_preprocess_default_resize_is_the_0_875_crop():
    assert Preprocess(224).resize == 256
    assert Preprocess(240).resize == math.floor(240 / 0.875) == 274


def test_resize_shorter_side_and_center_crop_follow_torchvision_rounding():
    assert resize_shorter_side(photo(1200, 678), 256).size == (453, 256)   # int(256*1200/678)
    assert resize_shorter_side(photo(678, 1200), 256).size == (256, 453)
    same = photo(256, 300)
    assert resize_shorter_side(same, 256) is same
    crop = center_crop(Image.fromarray(np.arange(7 * 5, dtype=np.uint8).reshape(5, 7)), 2)
    # (7-2)/2 = 2.5 and (5-2)/2 = 1.5 round half to even: left 2, top 2
    assert np.asarray(crop).tolist() == [[16, 17], [23, 24]]
    with pytest.raises(ValueError, match="cannot crop"):
        center_crop(photo(10, 4), 5)


def test_preprocess_batch_stacks_in_order():
    images = [photo(40, 30), photo(30, 50)]
    preprocess = Preprocess(size=16)
    batch = preprocess.batch(images)
    assert batch.shape == (2, 3, 16, 16) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch[1], preprocess(images[1]))


@pytest.mark.parametrize("settings, message", [
    (dict(size=0), "size must be"),
    (dict(size=224, resize=200), "at least the crop size"),
    (dict(mean=(0.5, 0.5)), "3 values"),
    (dict(std=(0.5, 0.0, 0.5)), "std must be positive"),
    (dict(interpolation="cubic"), "unknown interpolation"),
])
def test_preprocess_rejects_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        Preprocess(**settings)


# -- labels ----------------------------------------------------------------------------

def test_load_labels(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text("cat\n  dog \nbird, small\n\n\n", encoding="utf-8")
    assert load_labels(path) == ["cat", "dog", "bird, small"]


@pytest.mark.parametrize("text, message", [("", "empty"), ("a\n\nb\n", "blank label"),
                                           (None, "no such labels file")])
def test_load_labels_errors(text, message, tmp_path):
    path = tmp_path / "labels.txt"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ModelFormatError, match=message):
        load_labels(path)


def test_imagenet_labels_in_class_order():
    labels = imagenet_labels()
    assert len(labels) == 1000
    assert labels[0] == "tench, Tinca tinca"
    assert labels[817] == "sports car, sport car"
    assert labels[999] == "toilet tissue, toilet paper, bathroom tissue"


# -- Classifier on small exported models -------------------------------------------------

def test_softmax_is_stable_float32():
    scores = np.array([[1000.0, 1000.0, -1000.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    p = softmax(scores)
    assert p.dtype == np.float32
    np.testing.assert_allclose(p, [[0.5, 0.5, 0.0], [1 / 3] * 3], atol=1e-7)


class TinyNet(torch.nn.Module):
    """Mean colour -> linear scores; with ``probabilities`` the scores go through softmax."""

    def __init__(self, classes: int, probabilities: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(3, classes)
        self.probabilities = probabilities

    def forward(self, x):
        scores = self.fc(torch.flatten(self.pool(x), 1)) * 10
        return torch.softmax(scores, dim=1) if self.probabilities else scores


def tiny_classifier(tmp_path, classes=4, probabilities=False, **options) -> tuple[Classifier, TinyNet]:
    net = TinyNet(classes, probabilities).eval()
    param = export(net, [torch.rand(1, 3, 32, 32)], tmp_path, name=f"tiny{classes}{probabilities}")
    return Classifier(param, **options), net


@pytest.mark.parametrize("probabilities", [False, True])
def test_classifier_matches_the_network_and_batches(probabilities, tmp_path):
    classifier, net = tiny_classifier(tmp_path, probabilities=probabilities, batch_size=2,
                                      labels=["a", "b", "c", "d"])
    assert classifier.preprocess == Preprocess(size=32)             # the model's input size
    images = [photo(40 + 7 * i, 36, "RGB") for i in range(5)]
    calls = []
    results = classifier.classify(images, top_k=3, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(2, 5), (4, 5), (5, 5)]
    with torch.no_grad():
        expected = net(torch.from_numpy(classifier.preprocess.batch(images)))
    if not probabilities:
        expected = torch.softmax(expected, dim=1)
    for result, row in zip(results, expected.numpy()):
        assert [p.index for p in result.predictions] == list(np.argsort(-row)[:3])
        assert [p.label for p in result.predictions] == ["abcd"[p.index] for p in result.predictions]
        np.testing.assert_allclose([p.probability for p in result.predictions], np.sort(row)[::-1][:3],
                                   atol=1e-6)
        assert result.source == "<image>"


def test_classifier_labels_default_and_checks(tmp_path):
    classifier, _ = tiny_classifier(tmp_path, classes=4)
    [result] = classifier.classify([photo(32, 32)], top_k=10)
    assert sorted(p.label for p in result.predictions) == ["class 0", "class 1", "class 2", "class 3"]
    with pytest.raises(ModelFormatError, match="3 labels for a model with 4 classes"):
        Classifier(classifier.graph, labels=["x", "y", "z"])
    imagenet, _ = tiny_classifier(tmp_path, classes=1000)
    assert imagenet.labels == imagenet_labels()


def test_classifier_reads_a_labels_file_and_file_paths(tmp_path):
    (tmp_path / "labels.txt").write_text("w\nx\ny\nz\n", encoding="utf-8")
    classifier, _ = tiny_classifier(tmp_path, labels=tmp_path / "labels.txt")
    photo(50, 40).save(tmp_path / "one.png")
    [result] = classifier.classify([tmp_path / "one.png"], top_k=1)
    assert result.source == str(tmp_path / "one.png") and result.predictions[0].label in "wxyz"


@pytest.mark.parametrize("options, message", [(dict(batch_size=0), "batch_size"),
                                              (dict(outputs="scores"), "outputs")])
def test_classifier_rejects_bad_options(options, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        Classifier(tmp_path / "never_loaded.pnnx.param", **options)
