"""Images given as the bytes of a file or as decoded pixels (what Ray Data's readers yield)."""

import io

import numpy as np
import pytest
from PIL import Image

from kuiperinfer.models import sample_images
from kuiperinfer.vision import EFFICIENTNET_LITE, ImageError, load_image


@pytest.fixture(scope="module")
def car():
    return sample_images()[0]


def test_the_bytes_of_a_file_preprocess_as_the_file_does(car):
    np.testing.assert_array_equal(EFFICIENTNET_LITE(car.read_bytes()), EFFICIENTNET_LITE(car))
    assert np.asarray(load_image(bytearray(car.read_bytes()))).shape == np.asarray(load_image(car)).shape


def test_an_exif_orientation_in_the_bytes_is_applied(car):
    turned = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6                      # "rotate 90 degrees clockwise to display"
    with Image.open(car) as image:
        width, height = image.size
        image.save(turned, "JPEG", exif=exif)
    assert load_image(turned.getvalue()).size == (height, width)


@pytest.mark.parametrize("mode, channels", [("RGB", 3), ("RGBA", 4), ("L", None)])
def test_decoded_pixels_preprocess_as_the_picture_does(car, mode, channels):
    picture = load_image(car).convert(mode)
    pixels = np.asarray(picture)
    assert pixels.shape[2:] == ((channels,) if channels else ())
    np.testing.assert_array_equal(EFFICIENTNET_LITE(pixels), EFFICIENTNET_LITE(picture))


def test_one_channel_pixels_are_grey(car):
    grey = np.asarray(load_image(car).convert("L"))
    np.testing.assert_array_equal(EFFICIENTNET_LITE(grey[:, :, None]), EFFICIENTNET_LITE(grey))


@pytest.mark.parametrize("pixels, message", [
    (np.zeros((4, 4, 3), np.float32), "expected 8-bit pixels"),
    (np.zeros((4, 4, 2), np.uint8), "got uint8 (4, 4, 2)"),
    (np.zeros(16, np.uint8), "of shape (H, W), (H, W, 3) or (H, W, 4)"),
])
def test_pixels_that_are_not_a_picture_are_refused(pixels, message):
    with pytest.raises(ImageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_image(pixels)


@pytest.mark.parametrize("data, reason", [
    (b"not an image", "cannot read it as an image (unknown image format)"),
    (sample_images()[0].read_bytes()[:3000], "cannot read it as an image"),
])
def test_bytes_that_do_not_decode_raise_an_image_error_without_a_path(data, reason):
    with pytest.raises(ImageError) as error:
        load_image(data)
    assert error.value.path is None and error.value.reason.startswith(reason)
    assert "BytesIO" not in str(error.value)
