"""The options of a load: one frozen, validated object, one documented field per decision.

:class:`LoadOptions` is what :func:`kuiperinfer.load` takes, as onnxruntime's
``SessionOptions`` and ncnn's ``Option`` are what their sessions and nets take: its fields are
checked and its defaults resolved once, when it is made (the threads from the CPUs this
process may use), and nothing else in the engine chooses a default for them. A graph keeps
its options (``graph.options``); a server or a Ray actor hands the same object on.

:class:`BuildOptions` is the part of them a layer reads when it is created (ncnn's ``Option``
reaching ``create_pipeline``): which kernels it runs, the seed of its random generators and
what each of its products computes (:meth:`BuildOptions.precision_of`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any

from kuiperinfer.errors import OptionError
from kuiperinfer.kernels import jit
from kuiperinfer.kernels.matrix.precision import FP32, PRECISIONS, Precision
from kuiperinfer.kernels.matrix.precision import precision as choose_precision
from kuiperinfer.kernels.parallel import PIN, SPIN, ThreadPool, cores
from kuiperinfer.runtime.calibration import CalibrationTable

KERNELS = ("compiled", "reference")
"""The kernels a graph's layers may run: Numba's compiled ones, or the NumPy references."""
RENAMED = {"workers": "threads"}
"""Earlier spellings of options, accepted with a DeprecationWarning."""


@dataclass(frozen=True)
class LoadOptions:
    """Every decision of a load, each in one field (:func:`kuiperinfer.load` takes them as
    keywords). Made with some fields, the others take their defaults; ``threads``, ``spin``
    and ``pin`` left at None are resolved here (from the pool when one is given)."""

    optimize: bool = True
    """Rewrite the graph (fuse operators, pick Winograd and channels-last memory;
    :mod:`kuiperinfer.optimizer`). False runs the operators exactly as pnnx wrote them, so
    that every value pnnx named can be fetched."""
    kernels: str = "compiled"
    """``"compiled"``, Numba's kernels (resolved to the NumPy references where Numba cannot be
    imported), or ``"reference"``, the NumPy kernels they are tested against."""
    precision: str = "fp32"
    """What the products of convolutions and linear layers compute: ``"fp32"``; ``"bf16"``,
    their inputs rounded to bfloat16; ``"int8"``, uint8 activations and int8 weights, the
    activations' ranges from ``calibration`` (:mod:`kuiperinfer.kernels.matrix.precision`)."""
    calibration: str | os.PathLike | CalibrationTable | None = None
    """For ``int8``: the table :func:`kuiperinfer.quantize` wrote (a path, read here)."""
    threads: int | None = None
    """The threads a run uses, the caller's included (default: one per CPU this process may
    use; 1 runs everything in the calling thread); the pool's when ``pool`` is given."""
    spin: str | None = None
    """How the pool's threads wait between an operator's parts: ``"auto"`` (the default)
    spins while the machine is quiet and blocks while other processes want the cores,
    ``"always"`` spins, ``"never"`` blocks; the pool's when ``pool`` is given."""
    pin: str | None = None
    """Whether the pool's threads are pinned to CPUs: ``"auto"`` (the default) when the pool
    has a thread for every CPU the process may use (each helper to its own CPU, a run's
    caller to the others while the machine is quiet), ``"always"``, ``"never"``; the pool's
    when ``pool`` is given."""
    pool: ThreadPool | None = None
    """A :class:`~kuiperinfer.kernels.parallel.ThreadPool` shared with other graphs, instead
    of one of the graph's own."""
    keep_freed_memory: bool = True
    """Tune glibc's malloc to keep freed memory for the next run, so that a run in steady state
    takes no page faults (:mod:`kuiperinfer.runtime.memory`). It is a process-wide setting: the
    rest of the process keeps its freed memory too; False leaves malloc as it is."""
    warmup: bool = True
    """End the load with one run on zeros of the declared input shapes
    (:meth:`RuntimeGraph.warm_up <kuiperinfer.runtime.graph.RuntimeGraph.warm_up>`), so that
    the first call is as fast as the rest."""
    seed: int = 0
    """Seeds the model's random operators (``torch.randn``, ...): the same model loaded with
    the same seed draws the same values, call after call."""
    max_tensor_bytes: int | None = None
    """The largest weight or value the model may declare (None: 4 GiB); larger ones are
    refused before anything is allocated."""

    def __post_init__(self) -> None:
        for name in ("optimize", "keep_freed_memory", "warmup"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name} must be True or False, got {getattr(self, name)!r}")
        _choice("kernels", self.kernels, KERNELS)
        _choice("precision", self.precision, PRECISIONS)
        if self.spin is not None:
            _choice("spin", self.spin, SPIN)
        if self.pin is not None:
            _choice("pin", self.pin, PIN)
        for name in ("threads", "max_tensor_bytes"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise OptionError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not _is_int(self.seed):
            raise OptionError(f"seed must be a whole number, got {self.seed!r}")
        if self.pool is not None:
            if not isinstance(self.pool, ThreadPool):
                raise OptionError(f"pool must be a ThreadPool, got {type(self.pool).__name__}")
            for name in ("threads", "spin", "pin"):
                if getattr(self, name) not in (None, getattr(self.pool, name)):
                    raise OptionError(f"{name}={getattr(self, name)!r} with a pool whose {name} is "
                                      f"{getattr(self.pool, name)!r}: give the pool or the {name}, not both")
        if (self.precision == "int8") != (self.calibration is not None):
            raise OptionError("precision 'int8' needs a calibration table (make one with `kuiper quantize MODEL "
                              "--calibrate IMAGES -o TABLE`)" if self.calibration is None else
                              f"a calibration table is for precision 'int8', not {self.precision!r}")
        resolved = {
            "threads": self.pool.threads if self.pool else self.threads or cores(),
            "spin": self.pool.spin if self.pool else self.spin or "auto",
            "pin": self.pool.pin if self.pool else self.pin or "auto",
            "kernels": self.kernels if jit.AVAILABLE else "reference",
            "calibration": self.calibration if self.calibration is None or
            isinstance(self.calibration, CalibrationTable) else CalibrationTable.read(self.calibration)}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, options: LoadOptions | None = None, **values: Any) -> LoadOptions:
        """``options`` with ``values`` replacing some of its fields (a new object from the
        defaults when ``options`` is None); an earlier spelling (:data:`RENAMED`) warns."""
        for old, new in RENAMED.items():
            if old in values:
                warnings.warn(f"the load option {old!r} is now called {new!r}", DeprecationWarning, stacklevel=3)
                if values.get(new) not in (None, values[old]):
                    raise OptionError(f"{old}={values[old]!r} and {new}={values[new]!r}: give {new!r} only")
                values[new] = values.pop(old)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise OptionError(f"unknown load option(s) {', '.join(map(repr, unknown))}; the options are "
                              f"{', '.join(f.name for f in fields(cls))}")
        if options is None:
            return cls(**values)
        if "pool" in values:   # a new pool brings its own threads, spin and pin
            values = {"threads": None, "spin": None, "pin": None, **values}
        return replace(options, **values)

    def products(self) -> Precision:
        """What the graph's products compute and how this machine computes them."""
        return choose_precision(self.precision, kernels=self.kernels)

    def build(self) -> BuildOptions:
        """What the layers read when they are created."""
        return BuildOptions(self.kernels, self.seed, self.products(), self.calibration,
                            choose_precision("fp32", kernels=self.kernels))


@dataclass(frozen=True)
class BuildOptions:
    """What a layer reads when it is created (``Layer.create(op, options)``): the kernels it
    runs, the seed of its random generators and what its products compute."""

    kernels: str = "reference"
    """``"compiled"`` or ``"reference"`` (:attr:`LoadOptions.kernels`, resolved)."""
    seed: int = 0
    """The seed of the random operators' generators (:mod:`kuiperinfer.layers.randomness`)."""
    precision: Precision = FP32
    """The graph's precision."""
    calibration: CalibrationTable | None = None
    """For ``int8``: each product's activation range, by the name of its pnnx operator."""
    fp32: Precision = FP32
    """What an operator the calibration keeps in float32 computes: the same as in an ``fp32``
    load on this machine (:func:`~kuiperinfer.kernels.matrix.precision.precision`), so that
    its numbers do not depend on the graph's precision."""

    @property
    def compiled(self) -> bool:
        """Whether layers run their compiled kernels."""
        return self.kernels == "compiled"

    def precision_of(self, name: str) -> Precision:
        """What the weight product of the pnnx operator ``name`` computes: the graph's
        precision, or in ``int8`` the operator's calibrated :class:`~kuiperinfer.kernels.
        matrix.precision.Int8` (fp32 where the table keeps it so or does not name it). A
        fused operator asks for each product it computes by the name of the operator that
        computed it before the optimiser fused it, so both compute the same numbers."""
        if self.calibration is None:
            return self.precision
        found = self.calibration.precision_of(name)
        return self.fp32 if found is None or found.name == "fp32" else found


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise OptionError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
