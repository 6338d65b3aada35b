"""The calibration table: the activation range of each product ``int8`` computes.

``kuiper quantize`` (:func:`kuiperinfer.quantization.quantize`) writes it beside the model and
``load(..., precision="int8", calibration=TABLE)`` reads it, as ncnn's ``.table`` files are
read by ``ncnn2int8``. It is text a user may read and edit::

    kuiperinfer calibration 2
    model 3f5c...e1            # SHA-256 of the .pnnx.param it was calibrated on
    method percentile
    samples 100
    convbn2d_0 fp32            # left in float32
    convbn2d_1 -4.25 6.0       # the input's calibrated range: low high
    ...

One line per operator that multiplies by a weight (a convolution but a depthwise one, a
linear layer: the :attr:`~kuiperinfer.layers.base.Layer.products` of the layers), by its name
in the .param file, as pnnx wrote it: the optimiser's fused operators ask for the ranges of
the operators they replace by those names, so one table serves the model optimised or not.
``#`` starts a comment. The weights' scales are not in it: they are computed from the
weights at load.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from kuiperinfer.errors import CalibrationError
from kuiperinfer.kernels.matrix.int8 import activation_parameters
from kuiperinfer.kernels.matrix.precision import FP32, Int8, Precision

HEADER = "kuiperinfer calibration 2"
EARLIER = ("kuiperinfer calibration 1",)
"""Headers of earlier versions, whose tables named the operators of the optimised graph."""
KEEP = "fp32"


def model_digest(param_path: str | os.PathLike) -> str:
    """The SHA-256 of a .pnnx.param file, which ties a table to the model it was made on."""
    return hashlib.sha256(Path(param_path).read_bytes()).hexdigest()


@dataclass
class CalibrationTable:
    """Activation ranges by operator name, and the operators left in float32."""

    model: str
    """:func:`model_digest` of the model it was calibrated on."""
    method: str = "minmax"
    samples: int = 0
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    fp32: set[str] = field(default_factory=set)

    def precision_of(self, name: str) -> Precision | None:
        """The precision of operator ``name``: :class:`Int8` with its range, fp32 if the
        table keeps it so, None if the table does not name it."""
        if name in self.fp32:
            return FP32
        if name in self.ranges:
            scale, zero_point = activation_parameters(*self.ranges[name])
            return Int8(scale=scale, zero_point=zero_point)
        return None

    @property
    def names(self) -> set[str]:
        return set(self.ranges) | self.fp32

    def write(self, path: str | os.PathLike) -> None:
        lines = [HEADER, f"model {self.model}", f"method {self.method}", f"samples {self.samples}"]
        for name in sorted(self.names):
            lines.append(f"{name} {KEEP}" if name in self.fp32 else
                         f"{name} {self.ranges[name][0]!r} {self.ranges[name][1]!r}")
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: str | os.PathLike) -> CalibrationTable:
        """Read a table; :class:`CalibrationError` with the file and line for anything wrong."""
        path = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CalibrationError(f"cannot read the calibration table: {error}", path) from None
        table, header = cls(model=""), {}
        lines = [(number, line.split("#", 1)[0].split()) for number, line in enumerate(text.splitlines(), 1)]
        lines = [(number, words) for number, words in lines if words]
        if lines and " ".join(lines[0][1]) in EARLIER:
            raise CalibrationError(f"a table of an earlier kuiperinfer ({' '.join(lines[0][1])!r}), which named "
                                   f"the optimised graph's operators: calibrate the model again with `kuiper "
                                   f"quantize`", path, lines[0][0])
        if not lines or " ".join(lines[0][1]) != HEADER:
            raise CalibrationError(f"not a calibration table: it must start with {HEADER!r}", path, 1)
        for number, words in lines[1:]:
            name, values = words[0], words[1:]
            if name in ("model", "method", "samples") and len(values) == 1 and name not in header:
                header[name] = (number, values[0])
            elif name in table.names:
                raise CalibrationError(f"operator {name!r} is named twice", path, number)
            elif values == [KEEP]:
                table.fp32.add(name)
            elif len(values) == 2:
                table.ranges[name] = _range(values, path, number)
            else:
                raise CalibrationError(f"expected 'OPERATOR LOW HIGH' or 'OPERATOR {KEEP}', got {' '.join(words)!r}",
                                       path, number)
        if "model" not in header:
            raise CalibrationError("the table does not say which model it was calibrated on (a 'model' line)", path)
        table.model = header["model"][1]
        table.method = header.get("method", (0, "unknown"))[1]
        samples = header.get("samples", (0, "0"))
        if not samples[1].isdigit():
            raise CalibrationError(f"samples must be a whole number, got {samples[1]!r}", path, samples[0])
        table.samples = int(samples[1])
        return table


def _range(values: list[str], path: str, number: int) -> tuple[float, float]:
    try:
        low, high = float(values[0]), float(values[1])
    except ValueError:
        raise CalibrationError(f"the range {' '.join(values)!r} is not two numbers", path, number) from None
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise CalibrationError(f"the range [{low}, {high}] is not finite and ordered", path, number)
    return low, high
