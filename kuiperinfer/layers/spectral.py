"""Spectral and complex operators: ``torch.fft.*`` (and fftshift), ``torch.stft``/``torch.istft``
and the complex-number plumbing (``torch.complex``, ``view_as_complex``/``view_as_real``,
``real``/``imag``, conjugate and angle).

Complex values travel through the graph as NumPy complex arrays: complex64 for float32
data, complex128 where PyTorch would make it (float64 data). NumPy's FFTs (``np.fft``,
pocketfft like PyTorch's CPU backend) keep float32 precision and share PyTorch's three
normalisations: ``backward`` (none forward, 1/n inverse; pnnx writes ``norm=None``),
``forward`` (the reverse) and ``ortho`` (1/sqrt(n) both ways).

pnnx writes the FFTs as ``torch.fft.<name>`` with ``n``/``dim``/``norm`` (1-D) or
``s``/``dim``/``norm`` (2-D and n-D), ``None`` where not given. ``torch.stft`` and
``torch.istft`` take the window as their second input (``$window``: a graph input or a
``pnnx.Attribute``), or none (``window=None``, a rectangular window). For a few functions
pnnx has no name and writes the TorchScript operator, arguments as inputs: ``aten::stft``/
``aten::istft`` (when an argument was computed, as ``length=x.shape[-1]``),
``aten::fft_fftshift``/``aten::fft_ifftshift``, ``aten::_conj``, ``aten::conj_physical``
and ``aten::angle``. torchaudio's ``spectrogram`` and ``inverse_spectrogram`` are the STFT
layers with torchaudio's padding, reshaping, normalisations and power around them; pnnx
recognises them from the operators torchaudio's code traces to (the pad, reshape,
``stft`` and reshape of its ``spectrogram``), whoever wrote that code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.layers.base import NonParamLayer, declared_rank, keeps_batch
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

NORMS = ("backward", "forward", "ortho")
# The Hermitian transforms are the real ones run the other way round: hfft is the inverse
# real FFT of the conjugate, with the normalisation of the other direction.
_OTHER_WAY = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(op: RuntimeOperator) -> str:
    """The ``norm`` parameter: None (pnnx's default) is ``backward``."""
    norm = op.param_str("norm", Status.kParameterInvalidValue, default=None) or "backward"
    if norm not in NORMS:
        raise op.error(f"norm {norm!r} is not one of {', '.join(NORMS)}", Status.kParameterInvalidValue)
    return norm


def _complex_dtype(x: np.ndarray) -> np.dtype:
    """complex128 for float64/complex128 data, as torch does; complex64 otherwise."""
    return np.dtype(np.complex128) if x.dtype in (np.float64, np.complex128) else np.dtype(np.complex64)


def _real_dtype(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float64) if x.dtype in (np.float64, np.complex128) else np.dtype(np.float32)


def _fail(message: str) -> InferError:
    return InferError(message, status=InferStatus.kInferFailedDimensionParameterError)


# -- torch.fft ---------------------------------------------------------------------

_FFT_TYPES = [f"torch.fft.{name}{rank}" for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
              for rank in ("", "2", "n")]


@register_layer(*_FFT_TYPES)
class FFT(NonParamLayer):
    """One of the eighteen ``torch.fft`` transforms over ``dims`` with sizes ``s``.

    ``kind`` names the transform: ``fft``/``ifft`` complex to complex (a real input is
    taken as complex), ``rfft`` real to the one-sided half of the last dimension,
    ``irfft`` that half back to real, and ``hfft``/``ihfft``, their Hermitian mirror
    images (``hfft(x) = irfft(conj(x))`` normalised the other way). ``s[i]`` is the
    length dimension ``dims[i]`` is cropped or zero-padded to before the transform (-1:
    as it is); for ``irfft``/``hfft`` it is the length of the real output, whose last
    dimension has ``2 * (m - 1)`` elements by default for ``m`` input elements.
    """

    def __init__(self, layer_name: str, kind: str, sizes: tuple[int, ...] | None,
                 dims: tuple[int, ...] | None, norm: str):
        super().__init__(layer_name)
        self.kind, self.sizes, self.dims, self.norm = kind, sizes, dims, norm

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FFT:
        name = op.type.rsplit(".", 1)[-1]
        kind = name.rstrip("2n")
        if name.endswith("2") or name.endswith("n"):
            sizes = op.param_ints("s", status=Status.kParameterInvalidValue, default=None)
            default_dims = (-2, -1) if name.endswith("2") else None
            dims = op.param_ints("dim", status=Status.kParameterMissingDim, default=default_dims)
        else:  # 1-D: one length n and one dim
            n = op.param_int("n", Status.kParameterInvalidValue, default=None)
            sizes = None if n is None else (n,)
            dims = (op.param_int("dim", Status.kParameterMissingDim, default=-1),)
        if sizes is not None and any(size < 1 and size != -1 for size in sizes):
            raise op.error(f"signal sizes {sizes} must be positive (or -1: unchanged)",
                           Status.kParameterInvalidValue)
        if sizes is not None and dims is not None and len(sizes) != len(dims):
            raise op.error(f"{len(sizes)} sizes {sizes} for {len(dims)} dims {dims}", Status.kParameterInvalidValue)
        if dims is not None and len(set(dims)) != len(dims):
            raise op.error(f"dims {dims} repeat a dimension", Status.kParameterMissingDim)
        layer = cls(op.name, kind, sizes, dims, _norm(op))
        if dims is not None:
            layer.batch_independent = all(keeps_batch(op, d) for d in dims)
        else:  # all dimensions, or the last len(s)
            rank = declared_rank(op)
            layer.batch_independent = sizes is not None and rank >= 2 and len(sizes) < rank
        return layer

    def _axes(self, x: np.ndarray) -> tuple[int, ...]:
        if self.dims is None:
            count = x.ndim if self.sizes is None else len(self.sizes)
            if count > x.ndim:
                raise _fail(f"{count} signal sizes {self.sizes} for an input of rank {x.ndim}")
            return tuple(range(x.ndim - count, x.ndim))
        axes = tuple(d + x.ndim if d < 0 else d for d in self.dims)
        if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
            raise _fail(f"dims {self.dims} do not fit an input of shape {x.shape}")
        return axes

    def _lengths(self, x: np.ndarray, axes: tuple[int, ...], real_output: bool) -> list[int]:
        """The signal length along each axis, -1 (or no ``s``) resolved."""
        lengths = [x.shape[a] for a in axes] if self.sizes is None else \
            [x.shape[a] if size == -1 else size for a, size in zip(axes, self.sizes)]
        if real_output and axes and (self.sizes is None or self.sizes[-1] == -1):
            lengths[-1] = 2 * (x.shape[axes[-1]] - 1)
        if any(length < 1 for length in lengths):
            raise _fail(f"invalid number of data points ({min(lengths)}) for an input of shape {x.shape}")
        return lengths

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = self._axes(x)
        if self.kind in ("rfft", "ihfft"):
            if np.iscomplexobj(x):
                raise InferError(f"{self.kind} expects a real input but got {x.dtype}",
                                 status=InferStatus.kInferFailedOperationUnknown)
            x = x.astype(_real_dtype(x), copy=False)
        else:  # complex input; a real one is taken as complex
            x = x.astype(_complex_dtype(x), copy=False)
        lengths = self._lengths(x, axes, real_output=self.kind in ("irfft", "hfft"))
        norm = self.norm
        if self.kind == "fft":
            return [np.fft.fftn(x, lengths, axes, norm)]
        if self.kind == "ifft":
            return [np.fft.ifftn(x, lengths, axes, norm)]
        if self.kind == "rfft":
            return [np.fft.rfftn(x, lengths, axes, norm)]
        if self.kind == "irfft":
            return [np.fft.irfftn(x, lengths, axes, norm)]
        if self.kind == "hfft":
            return [np.fft.irfftn(np.conj(x), lengths, axes, _OTHER_WAY[norm])]
        return [np.conj(np.fft.rfftn(x, lengths, axes, _OTHER_WAY[norm]))]  # ihfft


@register_layer("aten::fft_fftshift", "aten::fft_ifftshift")
class FFTShift(NonParamLayer):
    """``torch.fft.fftshift``/``ifftshift``: roll the zero frequency to the middle and back.
    pnnx writes the TorchScript operators, the dims as a second input (None: every
    dimension; an int or a list from a ``pnnx.Expression``)."""

    def __init__(self, layer_name: str, inverse: bool):
        super().__init__(layer_name)
        self.inverse = inverse

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> FFTShift:
        if len(op.input_operands_seq) not in (1, 2):
            raise op.error(f"{op.type} takes the input and its dims, got {len(op.input_operands_seq)} inputs",
                           Status.kParameterInvalidValue)
        return cls(op.name, op.type == "aten::fft_ifftshift")

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        dims = inputs[1] if len(inputs) > 1 else None
        if isinstance(dims, np.ndarray):
            dims = dims.tolist()
        dims = [dims] if isinstance(dims, int) else dims
        if dims is not None and not (isinstance(dims, list) and all(type(d) is int and -x.ndim <= d < x.ndim
                                                                    for d in dims)):
            raise _fail(f"dims {dims!r} do not fit an input of shape {x.shape}")
        shift = np.fft.ifftshift if self.inverse else np.fft.fftshift
        return [shift(x, axes=dims)]


# -- short-time Fourier transform ------------------------------------------------------

# F.pad's modes as np.pad's
_PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def _optional_bool(op: RuntimeOperator, key: str) -> bool | None:
    """A bool parameter that may be None (torch's "decide from the data")."""
    return None if op.param_value(key) is None else op.param_bool(key, Status.kParameterInvalidValue)


def _lengths(n_fft: int, hop: int | None, win: int | None, inverse: bool) -> tuple[int, int, int]:
    """n_fft, hop_length (default n_fft // 4) and win_length (default n_fft); raises ValueError."""
    hop = n_fft // 4 if hop is None else hop
    win = n_fft if win is None else win
    if n_fft < 1 or hop < 1 or not 0 < win <= n_fft:
        raise ValueError(f"n_fft={n_fft}, hop_length={hop}, win_length={win}: expected n_fft > 0, "
                         f"hop_length > 0 and 0 < win_length <= n_fft")
    if inverse and hop > win:
        raise ValueError(f"hop_length={hop} is longer than win_length={win}")
    return n_fft, hop, win


def _window_lengths(op: RuntimeOperator, inverse: bool = False) -> tuple[int, int, int]:
    """The checked n_fft, hop_length and win_length parameters."""
    try:
        return _lengths(op.param_int("n_fft", Status.kParameterInvalidValue),
                        op.param_int("hop_length", Status.kParameterInvalidValue, default=None),
                        op.param_int("win_length", Status.kParameterInvalidValue, default=None), inverse)
    except ValueError as exc:
        raise op.error(str(exc), Status.kParameterInvalidValue) from None


def _full_window(window: np.ndarray | None, win_length: int, n_fft: int, dtype: np.dtype) -> np.ndarray | None:
    """The window padded with zeros on both sides to n_fft (None: no window, all ones)."""
    if window is not None:
        window = np.asarray(window)
        if window.shape != (win_length,):
            raise _fail(f"the window has shape {window.shape}, expected ({win_length},) (win_length)")
    if win_length == n_fft:
        return window
    left = (n_fft - win_length) // 2
    full = np.zeros(n_fft, window.dtype if window is not None else dtype)
    full[left:left + win_length] = 1 if window is None else window
    return full


@register_layer("torch.stft")
class STFT(NonParamLayer):
    """``torch.stft``: FFTs of overlapping windowed frames of a signal ``(L,)`` or ``(B, L)``.

    With ``center`` the signal is first padded by ``n_fft // 2`` on both sides
    (``pad_mode``). Frame ``t`` is ``x[t*hop : t*hop + n_fft]`` times the window (padded
    to n_fft, centred); each frame's FFT (one-sided for real data unless ``onesided`` is
    False; times ``n_fft ** -0.5`` when ``normalized``) is one column of the
    ``(B, n_freq, n_frames)`` result, which ``return_complex=False`` gives as
    ``view_as_real``. ``align_to_window`` (only without center) shifts the frames so that
    the window, not the frame, starts at ``t*hop``.
    """

    def __init__(self, layer_name: str, n_fft: int, hop: int, win: int, center: bool, pad_mode: str,
                 normalized: bool, onesided: bool | None, return_complex: bool | None,
                 align_to_window: bool, window_input: int | None):
        super().__init__(layer_name)
        self.n_fft, self.hop, self.win = n_fft, hop, win
        self.center, self.pad_mode, self.normalized = center, pad_mode, normalized
        self.onesided, self.return_complex, self.align_to_window = onesided, return_complex, align_to_window
        self.window_input = window_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> STFT:
        n_fft, hop, win = _window_lengths(op)
        center = op.param_bool("center", Status.kParameterInvalidValue, default=True)
        pad_mode = op.param_str("pad_mode", Status.kParameterInvalidValue, default="reflect")
        if pad_mode not in _PAD_MODES:
            raise op.error(f"pad_mode {pad_mode!r} is not one of {', '.join(_PAD_MODES)}",
                           Status.kParameterInvalidValue)
        align = op.param_bool("align_to_window", Status.kParameterInvalidValue, default=False)
        if align and center:
            raise op.error("align_to_window may only be set without center (as in torch)",
                           Status.kParameterInvalidValue)
        layer = cls(op.name, n_fft, hop, win, center, pad_mode,
                    op.param_bool("normalized", Status.kParameterInvalidValue, default=False),
                    _optional_bool(op, "onesided"), _optional_bool(op, "return_complex"),
                    align, op.input_index("window", 1))
        layer.batch_independent = declared_rank(op) == 2  # (B, L): each signal alone
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        window = None if self.window_input is None else inputs[self.window_input]
        if x.ndim not in (1, 2):
            raise _fail(f"stft expects a 1-D or 2-D (batch, length) signal, got shape {x.shape}")
        complex_data = np.iscomplexobj(x) or (window is not None and np.iscomplexobj(window))
        onesided = not complex_data if self.onesided is None else self.onesided
        if complex_data and onesided:
            raise _fail("cannot have a one-sided output if the window or the input is complex")
        return_complex = complex_data if self.return_complex is None else self.return_complex
        if self.return_complex is None and not complex_data:
            raise _fail("stft of a real signal needs return_complex given explicitly (as in torch)")
        if not (complex_data or x.dtype in (np.float32, np.float64)):
            x = x.astype(np.float32)
        signals = x if x.ndim == 2 else x[np.newaxis]
        if self.center:
            pad = self.n_fft // 2
            if self.pad_mode == "reflect" and pad >= signals.shape[-1]:
                raise _fail(f"reflect padding of {pad} needs a signal longer than that, got {signals.shape[-1]}")
            signals = np.pad(signals, ((0, 0), (pad, pad)), mode=_PAD_MODES[self.pad_mode])
        if self.align_to_window:  # the window starts at t*hop: shift the frames left by its offset
            left = (self.n_fft - self.win) // 2
            signals = np.pad(signals, ((0, 0), (left, self.n_fft - self.win - left)))
        if self.n_fft > signals.shape[-1]:
            raise _fail(f"n_fft={self.n_fft} is longer than the (padded) signal of {signals.shape[-1]}")
        full_window = _full_window(window, self.win, self.n_fft, _real_dtype(x))
        # (B, n_frames, n_fft): frames as a strided view, then windowed (a new array)
        frames = np.lib.stride_tricks.sliding_window_view(signals, self.n_fft, axis=-1)[:, ::self.hop]
        if full_window is not None:
            frames = frames * full_window
        norm = "ortho" if self.normalized else "backward"
        if onesided:
            spectrum = np.fft.rfft(frames, axis=-1, norm=norm)
        else:
            spectrum = np.fft.fft(frames.astype(_complex_dtype(frames), copy=False), axis=-1, norm=norm)
        out = spectrum.transpose(0, 2, 1)  # (B, n_freq, n_frames)
        if x.ndim == 1:
            out = out[0]
        return [out if return_complex else _view_as_real(out)]


@register_layer("torch.istft")
class ISTFT(NonParamLayer):
    """``torch.istft``: the signal back from its STFT ``(n_freq, n_frames)`` or ``(B, n_freq, n_frames)``.

    Each column's inverse FFT (``irfft`` to n_fft real values, or with ``return_complex``
    a complex ``ifft``), times the window, is overlap-added at ``t*hop``; the sum is
    divided by the overlap-add of the squared window (which must not vanish: the NOLA
    condition), trimmed by ``n_fft // 2`` at both ends with ``center``, and cut or
    zero-padded to ``length`` when given.
    """

    def __init__(self, layer_name: str, n_fft: int, hop: int, win: int, center: bool, normalized: bool,
                 onesided: bool | None, length: int | None, return_complex: bool, window_input: int | None):
        super().__init__(layer_name)
        self.n_fft, self.hop, self.win = n_fft, hop, win
        self.center, self.normalized, self.onesided = center, normalized, onesided
        self.length, self.return_complex, self.window_input = length, return_complex, window_input

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ISTFT:
        n_fft, hop, win = _window_lengths(op, inverse=True)
        length = op.param_int("length", Status.kParameterInvalidValue, default=None)
        if length is not None and length < 0:
            raise op.error(f"length {length} is negative", Status.kParameterInvalidValue)
        layer = cls(op.name, n_fft, hop, win,
                    op.param_bool("center", Status.kParameterInvalidValue, default=True),
                    op.param_bool("normalized", Status.kParameterInvalidValue, default=False),
                    _optional_bool(op, "onesided"), length,
                    op.param_bool("return_complex", Status.kParameterInvalidValue, default=False),
                    op.input_index("window", 1))
        layer.batch_independent = declared_rank(op) == 3
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        z = inputs[0]
        window = None if self.window_input is None else inputs[self.window_input]
        if not np.iscomplexobj(z) or z.ndim not in (2, 3):
            raise _fail(f"istft expects a complex (n_freq, n_frames) or (batch, n_freq, n_frames) input, "
                        f"got {z.dtype} of shape {z.shape}")
        n_fft = self.n_fft
        spectra = z if z.ndim == 3 else z[np.newaxis]
        fft_size, n_frames = spectra.shape[1:]
        onesided = fft_size != n_fft if self.onesided is None else self.onesided
        expected = n_fft // 2 + 1 if onesided else n_fft
        if fft_size != expected:
            raise _fail(f"{fft_size} frequencies, expected {expected} (n_fft={n_fft}, onesided={onesided})")
        norm = "ortho" if self.normalized else "backward"
        columns = spectra.transpose(0, 2, 1)  # (B, n_frames, n_freq)
        if self.return_complex:
            if onesided:
                raise _fail("cannot have a one-sided input with return_complex")
            frames = np.fft.ifft(columns, n_fft, axis=-1, norm=norm)
        else:
            if window is not None and np.iscomplexobj(window):
                raise _fail("a complex window needs return_complex")
            frames = np.fft.irfft(columns[..., :n_fft // 2 + 1], n_fft, axis=-1, norm=norm)
        full_window = _full_window(window, self.win, n_fft, _real_dtype(z))
        if full_window is None:
            full_window = np.ones(n_fft, _real_dtype(z))
        frames = frames * full_window
        # overlap-add the frames and the squared window at t * hop
        total = n_fft + self.hop * (n_frames - 1)
        signal = np.zeros((frames.shape[0], total), frames.dtype)
        squared = full_window * full_window  # as torch: window ** 2, complex for a complex window
        envelope = np.zeros(total, np.result_type(squared.dtype, np.float32))
        for t in range(n_frames):
            signal[:, t * self.hop:t * self.hop + n_fft] += frames[:, t]
            envelope[t * self.hop:t * self.hop + n_fft] += squared
        start = n_fft // 2 if self.center else 0
        if self.length is not None:
            end = start + self.length
        else:
            end = total - n_fft // 2 if self.center else total
        signal, envelope = signal[:, start:end], envelope[start:end]
        if envelope.size and np.abs(envelope).min() < 1e-11:
            raise _fail(f"window overlap add min: {np.abs(envelope).min():g} (the window's overlap-add "
                        f"vanishes: the NOLA condition fails)")
        signal = signal / envelope
        if end > total:  # a length longer than the frames cover: zeros at the end
            signal = np.pad(signal, ((0, 0), (0, end - total)))
        return [signal if z.ndim == 3 else signal[0]]


# torch's argument orders: pnnx keeps stft/istft as these TorchScript operators when an
# argument is computed (``length=x.shape[-1]``): every argument is then an input.
ATEN_STFT_ARGUMENTS = ("input", "n_fft", "hop_length", "win_length", "window", "normalized", "onesided",
                       "return_complex", "align_to_window")
ATEN_ISTFT_ARGUMENTS = ("input", "n_fft", "hop_length", "win_length", "window", "center", "normalized",
                        "onesided", "length", "return_complex")


def _argument(values: dict[str, Any], key: str, kind: type, optional: bool = True) -> Any:
    """An argument given as an input value: a Python number, None or a one-element array."""
    value = values.get(key)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if value is None and optional:
        return None
    if kind is int and type(value) is bool or not isinstance(value, kind):
        raise _fail(f"argument {key} is {value!r}, expected {'an int' if kind is int else 'a bool'}")
    return value


@register_layer("aten::stft", "aten::istft")
class ATenSTFT(NonParamLayer):
    """``aten::stft``/``aten::istft``: the layers above, their arguments read at run time.

    pnnx writes them when an argument was computed in the model; ``aten::stft`` has no
    ``center`` then: PyTorch padded the signal before it (pnnx writes that as ``F.pad``).
    """

    def __init__(self, layer_name: str, inverse: bool):
        super().__init__(layer_name)
        self.inverse = inverse

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ATenSTFT:
        inverse = op.type == "aten::istft"
        counts = (len(ATEN_ISTFT_ARGUMENTS),) if inverse else (len(ATEN_STFT_ARGUMENTS) - 1, len(ATEN_STFT_ARGUMENTS))
        if len(op.input_operands_seq) not in counts:
            raise op.error(f"{op.type} takes {' or '.join(map(str, counts))} inputs in torch's order, "
                           f"got {len(op.input_operands_seq)}", Status.kParameterInvalidValue)
        return cls(op.name, inverse)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        names = ATEN_ISTFT_ARGUMENTS if self.inverse else ATEN_STFT_ARGUMENTS
        values = dict(zip(names, inputs))
        try:
            n_fft, hop, win = _lengths(_argument(values, "n_fft", int, optional=False),
                                       _argument(values, "hop_length", int),
                                       _argument(values, "win_length", int), self.inverse)
        except ValueError as exc:
            raise _fail(str(exc)) from None
        window = values["window"]
        window_input = None if window is None else 1
        onesided = _argument(values, "onesided", bool)
        if self.inverse:
            length = _argument(values, "length", int)
            if length is not None and length < 0:
                raise _fail(f"length {length} is negative")
            layer: NonParamLayer = ISTFT(self.layer_name, n_fft, hop, win,
                                         _argument(values, "center", bool, optional=False),
                                         _argument(values, "normalized", bool, optional=False), onesided, length,
                                         _argument(values, "return_complex", bool, optional=False), window_input)
        else:
            layer = STFT(self.layer_name, n_fft, hop, win, False, "constant",
                         _argument(values, "normalized", bool, optional=False), onesided,
                         _argument(values, "return_complex", bool), bool(_argument(values, "align_to_window", bool)),
                         window_input)
        return layer.forward([values["input"], window])


# -- torchaudio -------------------------------------------------------------------------

def _spectrogram_norms(op: RuntimeOperator) -> tuple[bool, bool]:
    """torchaudio's ``normalized``: (frame_length, window) normalisation. pnnx writes False,
    ``frame_length`` or ``window`` (True, torchaudio's own spelling of ``window``, is read too)."""
    value = op.param_value("normalized", False)
    if isinstance(value, bool):
        return False, value
    if value not in ("frame_length", "window"):
        raise op.error(f"normalized {value!r} is not False, True, 'frame_length' or 'window'",
                       Status.kParameterInvalidValue)
    return value == "frame_length", value == "window"


def _window_energy(window: np.ndarray) -> np.ndarray:
    """``sqrt(sum(window ** 2))``, torchaudio's window normalisation."""
    return np.sqrt(np.sum(np.square(window, dtype=np.float32)))


class _TorchaudioLayer(NonParamLayer):
    """What the torchaudio layers share: the STFT's lengths, padding and normalisations,
    and the window as their second input (``$window``, a ``pnnx.Attribute``)."""

    @classmethod
    def read_common(cls, op: RuntimeOperator, inverse: bool) -> dict[str, Any]:
        if len(op.input_operands_seq) != 2 or op.input_index("window", 1) != 1:
            raise op.error(f"{op.type} takes the signal and the window as inputs, got "
                           f"{len(op.input_operands_seq)} inputs", Status.kParameterInvalidValue)
        n_fft, hop, win = _window_lengths(op, inverse)
        pad = op.param_int("pad", Status.kParameterInvalidValue, default=0)
        if pad < 0:
            raise op.error(f"pad {pad} is negative", Status.kParameterInvalidValue)
        frame_norm, window_norm = _spectrogram_norms(op)
        return dict(n_fft=n_fft, hop=hop, win=win, pad=pad, frame_norm=frame_norm, window_norm=window_norm,
                    center=op.param_bool("center", Status.kParameterInvalidValue, default=True),
                    onesided=op.param_bool("onesided", Status.kParameterInvalidValue, default=True))


@register_layer("torchaudio.functional.spectrogram")
class Spectrogram(_TorchaudioLayer):
    """``torchaudio.functional.spectrogram``: the STFT of a waveform ``(..., time)``,
    ``(..., n_freq, n_frames)``, as torchaudio computes it: the waveform padded by ``pad``
    zeros on both sides, every leading dimension's signal through :class:`STFT` (with
    ``center``, ``pad_mode``, ``onesided``; ``normalized="frame_length"`` is the STFT's
    own normalisation), divided by ``sqrt(sum(window ** 2))`` for ``normalized="window"``,
    and then, unless ``power`` is None (complex output), its magnitude to ``power``."""

    def __init__(self, layer_name: str, stft: STFT, pad: int, window_norm: bool, power: float | None):
        super().__init__(layer_name)
        self.stft, self.pad, self.window_norm, self.power = stft, pad, window_norm, power

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Spectrogram:
        common = cls.read_common(op, inverse=False)
        pad_mode = op.param_str("pad_mode", Status.kParameterInvalidValue, default="reflect")
        if pad_mode not in _PAD_MODES:
            raise op.error(f"pad_mode {pad_mode!r} is not one of {', '.join(_PAD_MODES)}",
                           Status.kParameterInvalidValue)
        power = op.param_number("power", default=None)
        if power is not None and (isinstance(power, bool) or not power > 0):
            raise op.error(f"power {power!r} must be None or a positive number", Status.kParameterInvalidValue)
        stft = STFT(op.name, common["n_fft"], common["hop"], common["win"], common["center"], pad_mode,
                    common["frame_norm"], common["onesided"], True, False, 1)
        layer = cls(op.name, stft, common["pad"], common["window_norm"], None if power is None else float(power))
        layer.batch_independent = declared_rank(op) >= 2
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        waveform, window = np.asarray(inputs[0]), np.asarray(inputs[1])
        if waveform.ndim < 1 or np.iscomplexobj(waveform):
            raise _fail(f"spectrogram expects a real waveform (..., time), got {waveform.dtype} of shape "
                        f"{waveform.shape}")
        if self.pad:
            waveform = np.pad(waveform, ((0, 0),) * (waveform.ndim - 1) + ((self.pad, self.pad),))
        signals = waveform.reshape(-1, waveform.shape[-1])
        spec = self.stft.forward([signals, window])[0]
        spec = spec.reshape(waveform.shape[:-1] + spec.shape[-2:])
        if self.window_norm:
            spec = spec / _window_energy(window)
        if self.power is None:
            return [spec]
        magnitude = np.abs(spec)
        return [magnitude if self.power == 1 else magnitude ** np.float32(self.power)]


@register_layer("torchaudio.functional.inverse_spectrogram")
class InverseSpectrogram(_TorchaudioLayer):
    """``torchaudio.functional.inverse_spectrogram``: a complex spectrogram
    ``(..., n_freq, n_frames)`` back to waveforms ``(..., time)``: times
    ``sqrt(sum(window ** 2))`` for ``normalized="window"``, every leading dimension's
    spectrogram through :class:`ISTFT`, and ``pad`` samples cut from both ends when a
    ``length`` is given (pnnx writes ``length=None``: then nothing is cut)."""

    def __init__(self, layer_name: str, istft: ISTFT, pad: int, length: int | None, window_norm: bool):
        super().__init__(layer_name)
        self.istft, self.pad, self.length, self.window_norm = istft, pad, length, window_norm

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> InverseSpectrogram:
        common = cls.read_common(op, inverse=True)
        length = op.param_int("length", Status.kParameterInvalidValue, default=None)
        if length is not None and length < 0:
            raise op.error(f"length {length} is negative", Status.kParameterInvalidValue)
        padded_length = None if length is None else length + 2 * common["pad"]
        istft = ISTFT(op.name, common["n_fft"], common["hop"], common["win"], common["center"], common["frame_norm"],
                      common["onesided"], padded_length, False, 1)
        layer = cls(op.name, istft, common["pad"], length, common["window_norm"])
        layer.batch_independent = declared_rank(op) >= 3
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        spec, window = np.asarray(inputs[0]), np.asarray(inputs[1])
        if not np.iscomplexobj(spec) or spec.ndim < 2:
            raise _fail(f"inverse_spectrogram expects a complex spectrogram (..., n_freq, n_frames), got "
                        f"{spec.dtype} of shape {spec.shape}")
        if self.window_norm:
            spec = spec * _window_energy(window)
        waveform = self.istft.forward([spec.reshape(-1, *spec.shape[-2:]), window])[0]
        if self.length is not None and self.pad > 0:
            waveform = waveform[:, self.pad:-self.pad]
        return [waveform.reshape(spec.shape[:-2] + waveform.shape[-1:])]


# -- complex numbers -------------------------------------------------------------------

def _view_as_real(z: np.ndarray) -> np.ndarray:
    """``(..., 2)`` real and imaginary parts of a complex array."""
    return np.stack((z.real, z.imag), axis=-1)


@register_layer("torch.complex")
class Complex(NonParamLayer):
    """``torch.complex(real, imag)``: both float32 (complex64) or both float64 (complex128)."""

    batch_independent = True

    def __init__(self, layer_name: str, real: int, imag: int):
        super().__init__(layer_name)
        self.real, self.imag = real, imag

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Complex:
        real, imag = op.input_index("real", 0), op.input_index("imag", 1)
        if real is None or imag is None:
            raise op.error("torch.complex needs the inputs real and imag", Status.kParameterMissingUnknown)
        return cls(op.name, real, imag)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        real, imag = inputs[self.real], inputs[self.imag]
        if real.dtype != imag.dtype or real.dtype not in (np.float32, np.float64):
            raise InferError(f"torch.complex needs two float32 or two float64 inputs, got {real.dtype} "
                             f"and {imag.dtype}", status=InferStatus.kInferFailedOperationUnknown)
        out = np.empty(np.broadcast_shapes(real.shape, imag.shape), _complex_dtype(real))
        out.real, out.imag = real, imag  # exact, also for infinities (real + 1j * imag is not)
        return [out]


@register_layer("torch.view_as_complex")
class ViewAsComplex(NonParamLayer):
    """``(..., 2)`` float pairs as complex numbers (a view where the memory allows)."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ViewAsComplex:
        layer = cls(op.name)
        layer.batch_independent = declared_rank(op) >= 2   # a 1-d input's pairs are its only dimension
        return layer

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = inputs[0]
        if x.ndim == 0 or x.shape[-1] != 2 or x.dtype not in (np.float32, np.float64):
            raise _fail(f"view_as_complex needs float32 or float64 values with a last dimension of 2, "
                        f"got {x.dtype} of shape {x.shape}")
        pairs = np.ascontiguousarray(x)
        return [pairs.view(_complex_dtype(x)).reshape(x.shape[:-1])]


@register_layer("torch.view_as_real")
class ViewAsReal(NonParamLayer):
    batch_independent = True

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ViewAsReal:
        return cls(op.name)

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        z = inputs[0]
        if not np.iscomplexobj(z):
            raise _fail(f"view_as_real needs a complex input, got {z.dtype}")
        return [_view_as_real(z)]


@register_layer("torch.real", "torch.imag")
class RealImag(NonParamLayer):
    """The real or imaginary part (views). ``real`` of real data is the data; ``imag``
    of real data is refused, as in torch."""

    batch_independent = True

    def __init__(self, layer_name: str, imaginary: bool):
        super().__init__(layer_name)
        self.imaginary = imaginary

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RealImag:
        return cls(op.name, op.type == "torch.imag")

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        z = inputs[0]
        if not np.iscomplexobj(z):
            if self.imaginary:
                raise _fail(f"imag is not defined for real data ({z.dtype}), as in torch")
            return [z]
        return [z.imag if self.imaginary else z.real]


@register_layer("aten::_conj", "aten::conj_physical", "aten::angle")
class ConjAngle(NonParamLayer):
    """The complex conjugate and the angle (phase). pnnx has no names of its own for them
    and writes the TorchScript operators: ``aten::_conj`` for ``torch.conj``/``Tensor.conj()``.
    Of real data the conjugate is the data, and the angle is 0, or pi for negatives (NaN stays)."""

    batch_independent = True

    def __init__(self, layer_name: str, angle: bool):
        super().__init__(layer_name)
        self.angle = angle

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> ConjAngle:
        return cls(op.name, op.type == "aten::angle")

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        z = inputs[0]
        if not self.angle:
            return [np.conj(z) if np.iscomplexobj(z) else z]
        if np.iscomplexobj(z):
            return [np.angle(z)]
        angle = np.where(z < 0, np.pi, 0.0).astype(_real_dtype(z))  # -0.0 is not negative
        return [np.where(np.isnan(z), z, angle) if z.dtype.kind == "f" else angle]
