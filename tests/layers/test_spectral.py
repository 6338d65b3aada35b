"""torch.fft, torch.stft/istft and the complex-number operators against PyTorch.

Complex outputs are compared as complex arrays (dtype complex64, or complex128 for
float64 models). Each model is exported at batch 1 and run at batch 1 and 3, except
where the signal itself has no batch dimension.
"""

import numpy as np
import pytest
import torch
from handmade import make_operator
from oracle import Branches, Lambda, check_model, export, torch_outputs

import kuiperinfer
from kuiperinfer.layers import LayerRegisterer


def op_types(graph):
    return {op.type for op in graph.operators}


def subdirectory(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def randn(*shape, seed=0, complex_=False, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator, dtype=dtype)
    if complex_:
        return torch.complex(x, torch.randn(*shape, generator=generator, dtype=dtype))
    return x


def check_variants(fns, op_type, inputs, batched, directory, expected_types=()):
    """Export ``fns`` as one model on ``inputs`` (batch 1), compare there and on ``batched``;
    pnnx must have written ``op_type`` (and ``expected_types``)."""
    graph = check_model(Branches(*fns), inputs, directory, [batched] if batched is not None else [])
    written = op_types(graph)
    assert {op_type, *expected_types} <= written, f"pnnx wrote {sorted(written)}"
    return graph


# -- torch.fft ---------------------------------------------------------------------------

# What each transform takes: any data (real or complex), real data, or a one-sided half spectrum
TAKES = {"fft": "any", "ifft": "any", "rfft": "real", "ihfft": "real", "irfft": "half", "hfft": "half"}
NORMS = [None, "backward", "forward", "ortho"]


def fft_inputs(kind, shape, batch):
    """Inputs at batch 1 and at ``batch``: a real signal, and for fft/ifft a complex one too;
    for irfft/hfft a complex half spectrum."""
    def make(b, seed):
        real = randn(b, *shape[1:], seed=seed)
        if TAKES[kind] == "any":
            return [real, randn(b, *shape[1:], seed=seed + 1, complex_=True)]
        return [randn(b, *shape[1:], seed=seed, complex_=True) if TAKES[kind] == "half" else real]
    return make(1, 0), make(batch, 10)


def on_every_input(f):
    """A function applying ``f`` to each input (the real and the complex one)."""
    return lambda *xs: tuple(f(x) for x in xs)


@pytest.mark.parametrize("kind", list(TAKES))
def test_fft_1d(kind, tmp_path):
    """n pads and crops (for irfft/hfft: the output length), dim picks the axis (0: across
    the batch), the three normalisations."""
    f = getattr(torch.fft, kind)
    variants = [lambda x, norm=norm: f(x, norm=norm) for norm in NORMS] + [
        lambda x: f(x, n=13), lambda x: f(x, n=4), lambda x: f(x, dim=1),
        lambda x: f(x, n=7, dim=-2, norm="ortho"), lambda x: f(x, n=6, dim=0, norm="forward"),
    ]
    inputs, batched = fft_inputs(kind, (1, 4, 10), batch=3)
    check_variants([on_every_input(v) for v in variants], f"torch.fft.{kind}", inputs, batched, tmp_path)


@pytest.mark.parametrize("kind", list(TAKES))
def test_fft_2d(kind, tmp_path):
    """s pads, crops or keeps (-1) each dimension; dim in any order (the last one listed is
    the halved one for rfft2/irfft2/hfft2/ihfft2) and across the batch."""
    f = getattr(torch.fft, f"{kind}2")
    variants = [lambda x, norm=norm: f(x, norm=norm) for norm in NORMS] + [
        lambda x: f(x, s=(7, 12)), lambda x: f(x, s=(3, 4)), lambda x: f(x, s=(-1, 9), norm="ortho"),
        lambda x: f(x, dim=(1, 3)), lambda x: f(x, dim=(-1, -2), norm="forward"),
        lambda x: f(x, s=(2, 6), dim=(0, 2)),
    ]
    inputs, batched = fft_inputs(kind, (1, 3, 6, 5), batch=3)
    check_variants([on_every_input(v) for v in variants], f"torch.fft.{kind}2", inputs, batched, tmp_path)


@pytest.mark.parametrize("kind", list(TAKES))
def test_fft_nd(kind, tmp_path):
    """Without dim over every dimension (the batch too) or the last len(s); dim alone; s
    with dim; a single dimension."""
    f = getattr(torch.fft, f"{kind}n")
    variants = [lambda x, norm=norm: f(x, norm=norm) for norm in NORMS] + [
        lambda x: f(x, dim=(1, 2, 3)), lambda x: f(x, s=(4, 10)), lambda x: f(x, dim=(-1,), norm="ortho"),
        lambda x: f(x, s=(2, 5, 6), dim=(1, 3, 2), norm="forward"), lambda x: f(x, s=(-1, 3), dim=(2, 1)),
    ]
    inputs, batched = fft_inputs(kind, (1, 3, 6, 5), batch=2)
    graph = check_variants([on_every_input(v) for v in variants], f"torch.fft.{kind}n", inputs, batched,
                           tmp_path)
    # over every dimension the batch is one of them: the samples of a batch are not independent
    assert any(not op.layer.batch_independent for op in graph.operators if op.type == f"torch.fft.{kind}n")


def test_fftshift_and_ifftshift(tmp_path):
    """pnnx writes the TorchScript operators, the dims a second input (None, or a list)."""
    module = Lambda(lambda x: (torch.fft.fftshift(x, dim=(1, 2)), torch.fft.ifftshift(x, dim=-1),
                               torch.fft.fftshift(torch.fft.fft2(x), dim=(-2, -1)), torch.fft.ifftshift(x, dim=(2,))))
    graph = check_model(module, [randn(1, 5, 6)], tmp_path, [[randn(3, 5, 6, seed=1)]])
    assert {"aten::fft_fftshift", "aten::fft_ifftshift"} <= op_types(graph)
    everything = Lambda(lambda x: (torch.fft.fftshift(x), torch.fft.ifftshift(x)))  # dim=None: the batch too
    check_model(everything, [randn(3, 5, 6)], subdirectory(tmp_path, "all"))


def test_fft_of_float64_gives_complex128_and_back(tmp_path):
    x = randn(1, 4, 16, dtype=torch.float64)
    module = Lambda(lambda x: (torch.fft.fft(x), torch.fft.rfft2(x), torch.fft.irfft(torch.fft.rfft(x)),
                               torch.fft.ihfftn(x, norm="ortho")))
    graph = check_model(module, [x], tmp_path, [[randn(3, 4, 16, seed=1, dtype=torch.float64)]])
    outputs = graph.run(x.numpy())
    assert [o.dtype for o in outputs] == [np.complex128, np.complex128, np.float64, np.complex128]


class LowPass(torch.nn.Module):
    """A typical use: filtering in the frequency domain (rfft, a mask, irfft)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", (torch.arange(17) < 5).float())

    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * self.mask, n=x.shape[-1], dim=-1)


def test_spectral_filtering_with_rfft_and_irfft(tmp_path):
    check_model(LowPass(), [randn(1, 2, 32)], tmp_path, [[randn(4, 2, 32, seed=3)]])


def test_fft_refusals_are_clear(tmp_path):
    graph = kuiperinfer.load(export(Lambda(lambda z: torch.fft.rfft(z.real)), [randn(1, 8, complex_=True)],
                                    tmp_path))
    rfft = next(op for op in graph.operators if op.type == "torch.fft.rfft")
    with pytest.raises(kuiperinfer.KuiperError, match="rfft expects a real input but got complex64"):
        rfft.layer.forward([np.ones(8, np.complex64)])


# -- stft and istft ----------------------------------------------------------------------

class WithWindow(torch.nn.Module):
    """Holds a window as a buffer (pnnx writes it as a pnnx.Attribute feeding $window)."""

    def __init__(self, fn, window):
        super().__init__()
        self.fn = fn
        self.register_buffer("window", window)

    def forward(self, *xs):
        return self.fn(self.window, *xs)


STFT_OPTIONS = [
    dict(n_fft=16),                                            # defaults: hop 4, center, reflect
    dict(n_fft=16, hop_length=5, center=False),
    dict(n_fft=16, hop_length=4, win_length=12, pad_mode="constant", normalized=True),
    dict(n_fft=15, hop_length=3, win_length=10, pad_mode="replicate", onesided=False),
    dict(n_fft=16, hop_length=6, pad_mode="circular", return_complex=False),
    dict(n_fft=16, hop_length=4, win_length=8, center=False, align_to_window=True),
    dict(n_fft=16, hop_length=4, win_length=8, center=False, align_to_window=False),
]


@pytest.mark.parametrize("options", STFT_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_stft(options, tmp_path):
    """Every option, with the window held by the model (pnnx.Attribute), made in forward
    (pnnx folds it into an attribute), given as an input, and absent (rectangular)."""
    options = {"return_complex": True, **options}
    win = options.get("win_length", options["n_fft"])

    def stft(x, window):
        return torch.stft(x, window=window, **options)

    module = WithWindow(lambda held, x, given: (stft(x, held), stft(x, torch.hann_window(win)), stft(x, given),
                                                stft(x, None)), torch.hamming_window(win))
    inputs = [randn(1, 100), torch.rand(win) + 0.5]
    graph = check_model(module, inputs, tmp_path, [[randn(3, 100, seed=1), inputs[1]]])
    assert "torch.stft" in op_types(graph)


def test_stft_of_one_signal_and_of_a_complex_signal(tmp_path):
    """A signal without a batch dimension (its length may change), and complex signals
    (two-sided spectra, also with a complex window)."""
    window = torch.hann_window(12)
    module = Lambda(lambda x: torch.stft(x, 12, hop_length=3, window=window, return_complex=True))
    check_model(module, [randn(64)], subdirectory(tmp_path, "1d"), [[randn(90, seed=1)]])
    cwindow = torch.complex(window, torch.linspace(-0.5, 0.5, 12))
    complex_module = Lambda(lambda z: (torch.stft(z, 12, hop_length=3, window=window, return_complex=True),
                                       torch.stft(z, 12, window=cwindow, center=False, return_complex=True),
                                       torch.stft(z.real, 12, window=cwindow, return_complex=True)))
    check_model(complex_module, [randn(1, 64, complex_=True)], subdirectory(tmp_path, "c"),
                [[randn(2, 64, seed=1, complex_=True)]])


ISTFT_OPTIONS = [
    dict(n_fft=16),
    dict(n_fft=16, hop_length=4, win_length=12, normalized=True),
    dict(n_fft=16, hop_length=5, center=False),
    dict(n_fft=16, hop_length=4, length=90),                     # cut
    dict(n_fft=16, hop_length=4, length=120),                    # longer: zeros at the end
    dict(n_fft=15, hop_length=5, onesided=False, stft_onesided=False),
    dict(n_fft=16, hop_length=4, onesided=False, return_complex=True, stft_onesided=False),
]


@pytest.mark.parametrize("options", ISTFT_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_istft(options, tmp_path):
    """The spectrum is an input (complex); window held, folded and absent. (A window given
    as an input is in test_istft_refuses_a_window_that_does_not_overlap: loading's warm-up
    on zeros is then a zero window, which istft refuses as torch does.)"""
    options = dict(options)
    stft_onesided = options.pop("stft_onesided", True)
    n_fft, hop = options["n_fft"], options.get("hop_length", options["n_fft"] // 4)
    win = options.get("win_length", n_fft)
    spectrum = torch.stft(randn(1, 100), n_fft, hop_length=hop, window=torch.hamming_window(n_fft),
                          onesided=stft_onesided, center=options.get("center", True), return_complex=True)
    batched = torch.stft(randn(3, 100, seed=1), n_fft, hop_length=hop, window=torch.hamming_window(n_fft),
                         onesided=stft_onesided, center=options.get("center", True), return_complex=True)

    def istft(z, window):
        return torch.istft(z, window=window, **options)

    def every_window(held, z):
        return istft(z, held), istft(z, torch.hann_window(win, periodic=False) + 0.1), istft(z, None)

    graph = check_model(WithWindow(every_window, torch.hamming_window(win)), [spectrum], tmp_path, [[batched]])
    assert "torch.istft" in op_types(graph)


def test_istft_of_one_spectrum_and_the_round_trip(tmp_path):
    window = torch.hann_window(16)

    def round_trip(x):
        spectrum = torch.stft(x, 16, hop_length=4, window=window, return_complex=True)
        return torch.istft(spectrum * 0.5, 16, hop_length=4, window=window, length=90)

    check_model(Lambda(round_trip), [randn(1, 80)], subdirectory(tmp_path, "batch"), [[randn(4, 80, seed=2)]])
    single = Lambda(lambda z: torch.istft(z, 16, hop_length=4, window=window))
    check_model(single, [torch.stft(randn(80), 16, hop_length=4, window=window, return_complex=True)],
                subdirectory(tmp_path, "one"))


def test_aten_stft_and_istft_when_an_argument_is_computed(tmp_path):
    """With hop_length or length computed from a shape, pnnx keeps aten::stft (every argument
    an input, center done by F.pad before it) and aten::istft."""
    window = torch.hann_window(16)

    def fn(x):
        hop = x.shape[-1] // 20
        spectrum = torch.stft(x, 16, hop_length=hop, window=window, return_complex=True)
        uncentred = torch.stft(x, 16, hop_length=hop, window=window, center=False, normalized=True,
                               return_complex=True)
        return spectrum, uncentred, torch.istft(spectrum, 16, hop_length=4, window=window, length=x.shape[-1])

    graph = check_model(Lambda(fn), [randn(2, 80)], tmp_path, [[randn(3, 80, seed=1)]], dynamic=True)
    assert {"aten::stft", "aten::istft"} <= op_types(graph)


def test_istft_refuses_a_window_that_does_not_overlap(tmp_path):
    """torch's NOLA check, with the same words. A window given as an input is zeros in the
    warm-up that ends loading: the warm-up is skipped, and the model loads all the same."""
    z = torch.stft(randn(1, 64), 16, hop_length=4, window=torch.ones(16), return_complex=True)
    module = Lambda(lambda z, w: torch.istft(z, 16, hop_length=4, window=w))
    path = export(module, [z, torch.hann_window(16)], tmp_path)
    graph = kuiperinfer.load(path)
    for window in (torch.hann_window(16), torch.rand(16) + 0.5):
        ours = graph.run(z.numpy(), window.numpy())
        np.testing.assert_allclose(ours[0], torch_outputs(module, [z, window])[0], rtol=1e-3, atol=1e-4)
    with pytest.raises(kuiperinfer.KuiperError, match="window overlap add min"):
        graph.run(z.numpy(), np.zeros(16, np.float32))


class MelSpectrogram(torch.nn.Module):
    """A torchaudio-style MelSpectrogram + AmplitudeToDB: STFT power, a mel filterbank, dB."""

    def __init__(self, sample_rate=8000, n_fft=64, hop=16, n_mels=10, power=2.0):
        super().__init__()
        self.n_fft, self.hop, self.power = n_fft, hop, power
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("filterbank", self.mel_filterbank(sample_rate, n_fft // 2 + 1, n_mels))

    @staticmethod
    def mel_filterbank(sample_rate, n_freqs, n_mels):
        def mel(f):
            return 2595.0 * np.log10(1.0 + f / 700.0)

        def hz(m):
            return 700.0 * (10 ** (m / 2595.0) - 1.0)

        freqs = np.linspace(0, sample_rate / 2, n_freqs)
        points = hz(np.linspace(mel(0.0), mel(sample_rate / 2), n_mels + 2))
        down = (freqs[:, None] - points[None, :-2]) / (points[1:-1] - points[:-2])
        up = (points[None, 2:] - freqs[:, None]) / (points[2:] - points[1:-1])
        return torch.from_numpy(np.maximum(0, np.minimum(down, up)).astype(np.float32))  # (n_freqs, n_mels)

    def forward(self, waveform):
        shape = waveform.shape
        flat = waveform.reshape(-1, shape[-1])
        spec = torch.stft(flat, self.n_fft, hop_length=self.hop, window=self.window, center=True,
                          pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        power = spec.abs().pow(self.power)
        power = power.reshape(shape[:-1] + power.shape[-2:])
        mel = torch.matmul(power.transpose(-1, -2), self.filterbank).transpose(-1, -2)
        return 10.0 * torch.log10(torch.clamp(mel, min=1e-10)), spec.real.pow(2) + spec.imag.pow(2)


def test_mel_spectrogram_end_to_end(tmp_path):
    """stft -> abs().pow(2) (a pnnx.Expression on complex values) -> mel matmul -> dB."""
    torch.manual_seed(0)
    t = torch.arange(800) / 8000.0
    waveform = (torch.sin(2 * np.pi * 440 * t) + 0.1 * torch.randn(800)).reshape(1, 1, 800)
    other = torch.randn(3, 1, 800)
    graph = check_model(MelSpectrogram(), [waveform], tmp_path, [[other]], atol=1e-3)
    assert {"torch.stft", "pnnx.Expression", "torch.real", "torch.imag"} <= op_types(graph)
    expressions = [op.params["expr"].text for op in graph.operators if op.type == "pnnx.Expression"]
    assert any("abs(" in text for text in expressions)


def test_stft_refuses_options_torch_refuses(tmp_path):
    module = Lambda(lambda x: torch.stft(x, 16, hop_length=4, window=torch.ones(16), return_complex=True))
    path = export(module, [randn(1, 64)], tmp_path)
    text = path.read_text()
    for old, new, words in [("hop_length=4", "hop_length=0", "expected n_fft > 0, hop_length > 0"),
                            ("center=True", "center=True align_to_window=True", "align_to_window may only"),
                            ("pad_mode=reflect", "pad_mode=mirror", "pad_mode 'mirror' is not one of")]:
        path.write_text(text.replace(old, new))
        with pytest.raises(kuiperinfer.KuiperError, match=words):
            kuiperinfer.load(path)
    path.write_text(text)
    stft = next(op for op in kuiperinfer.load(path).operators if op.type == "torch.stft")
    with pytest.raises(kuiperinfer.KuiperError, match="reflect padding of 8 needs a signal longer"):
        stft.layer.forward([np.ones((1, 8), np.float32), np.ones(16, np.float32)])


# -- complex numbers ---------------------------------------------------------------------

def test_complex(tmp_path):
    module = Lambda(lambda x, y: (torch.complex(x, y), torch.complex(y, x[:, :1]), torch.complex(x, y) * 2))
    graph = check_model(module, [randn(1, 3, 4), randn(1, 3, 4, seed=1)], tmp_path,
                        [[randn(3, 3, 4, seed=2), randn(3, 3, 4, seed=3)]])
    assert "torch.complex" in op_types(graph)


def test_view_as_complex(tmp_path):
    module = Lambda(lambda x: (torch.view_as_complex(x), torch.view_as_complex(x.transpose(1, 2).contiguous()),
                               torch.view_as_complex(torch.stack((x[..., 0], x[..., 1] * 2), -1))))
    graph = check_model(module, [randn(1, 2, 5, 2)], tmp_path, [[randn(3, 2, 5, 2, seed=1)]])
    assert "torch.view_as_complex" in op_types(graph)


def test_view_as_real(tmp_path):
    module = Lambda(lambda z: (torch.view_as_real(z), torch.view_as_real(z * z).sum(-1),
                               torch.view_as_real(torch.fft.fft(z.real))))
    graph = check_model(module, [randn(1, 3, 4, complex_=True)], tmp_path,
                        [[randn(2, 3, 4, seed=1, complex_=True)]])
    assert "torch.view_as_real" in op_types(graph)


def test_real_and_imag(tmp_path):
    module = Lambda(lambda z, x: (torch.real(z), torch.imag(z), z.real * 2 + z.imag, torch.real(x)))
    graph = check_model(module, [randn(1, 3, 4, complex_=True), randn(1, 3, 4)], tmp_path,
                        [[randn(2, 3, 4, seed=1, complex_=True), randn(2, 3, 4, seed=2)]])
    assert {"torch.real", "torch.imag"} <= op_types(graph)


def test_conj_and_angle(tmp_path):
    """pnnx writes these as the TorchScript operators aten::_conj, aten::conj_physical and aten::angle."""
    x = torch.tensor([[-2.0, -0.0, 0.0, 1.5, float("nan"), -float("inf")]])
    module = Lambda(lambda z, x: (torch.conj(z) * z, torch.conj_physical(z), torch.angle(z), torch.angle(x)))
    graph = kuiperinfer.load(export(module, [randn(1, 6, complex_=True), x], tmp_path))
    assert {"aten::_conj", "aten::conj_physical", "aten::angle"} <= op_types(graph)
    for case in ([randn(1, 6, complex_=True), x], [randn(3, 6, seed=1, complex_=True), x.repeat(3, 1)]):
        ours = graph.run(*[t.numpy() for t in case])
        expected = torch_outputs(module, case)
        assert [o.dtype for o in ours] == [e.dtype for e in expected]
        for got, want in zip(ours, expected):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_complex_inputs_must_be_complex_and_real_inputs_real(tmp_path):
    graph = kuiperinfer.load(export(Lambda(lambda z, x: torch.real(z) + x),
                                    [randn(1, 4, complex_=True), randn(1, 4)], tmp_path))
    got = graph.run(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32))  # a real value: imag 0
    np.testing.assert_array_equal(got[0], np.full((1, 4), 2, np.float32))
    with pytest.raises(kuiperinfer.KuiperError, match="'pnnx_input_1' is complex \\(complex64\\), the model "
                                                      "expects float32 values"):
        graph.run(np.ones((1, 4), np.complex64), np.ones((1, 4), np.complex64))


# -- torchaudio -------------------------------------------------------------------------
# torchaudio is not installed with this torch. Its two functions are written here from their
# definitions (torchaudio.functional.spectrogram / inverse_spectrogram): pnnx recognises the
# operators they trace to, whoever wrote the code, and writes the torchaudio types.

def spectrogram(waveform, pad, window, n_fft, hop_length, win_length, power, normalized, center=True,
                pad_mode="reflect", onesided=True):
    if pad > 0:
        waveform = torch.nn.functional.pad(waveform, (pad, pad), "constant")
    frame_length_norm = normalized == "frame_length"
    window_norm = normalized == "window" or normalized is True
    shape = waveform.size()
    waveform = waveform.reshape(-1, shape[-1])
    spec_f = torch.stft(input=waveform, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window,
                        center=center, pad_mode=pad_mode, normalized=frame_length_norm, onesided=onesided,
                        return_complex=True)
    spec_f = spec_f.reshape(shape[:-1] + spec_f.shape[-2:])
    if window_norm:
        spec_f /= window.pow(2.0).sum().sqrt()
    if power is not None:
        if power == 1.0:
            return spec_f.abs()
        return spec_f.abs().pow(power)
    return spec_f


def inverse_spectrogram(spectrogram, length, pad, window, n_fft, hop_length, win_length, normalized, center=True,
                        onesided=True):
    frame_length_norm = normalized == "frame_length"
    window_norm = normalized == "window" or normalized is True
    if window_norm:
        spectrogram = spectrogram * window.pow(2.0).sum().sqrt()
    shape = spectrogram.size()
    spectrogram = spectrogram.reshape(-1, shape[-2], shape[-1])
    waveform = torch.istft(input=spectrogram, n_fft=n_fft, hop_length=hop_length, win_length=win_length,
                           window=window, center=center, normalized=frame_length_norm, onesided=onesided,
                           length=length + 2 * pad if length is not None else None, return_complex=False)
    if length is not None and pad > 0:
        waveform = waveform[:, pad:-pad]
    return waveform.reshape(shape[:-2] + waveform.shape[-1:])


class Spectrogram(torch.nn.Module):
    def __init__(self, window_length=16, as_real=False, **options):
        super().__init__()
        self.register_buffer("window", torch.hann_window(window_length) + 0.1)
        self.options, self.as_real = options, as_real

    def forward(self, x):
        y = spectrogram(x, window=self.window, **self.options)
        return torch.view_as_real(y) if self.as_real else y


class InverseSpectrogram(torch.nn.Module):
    def __init__(self, window_length=16, **options):
        super().__init__()
        self.register_buffer("window", torch.hann_window(window_length) + 0.1)
        self.options = options

    def forward(self, z):
        return inverse_spectrogram(z, None, window=self.window, **self.options)


STFT_LENGTHS = dict(n_fft=16, hop_length=4, win_length=16)
SPECTROGRAM_CASES = [
    dict(power=None, normalized=False),
    dict(power=2.0, normalized=False),
    dict(power=1.0, normalized="window"),
    dict(power=2.0, normalized="frame_length", center=False),
    dict(power=2.0, normalized=False, pad=3, pad_mode="constant"),
    dict(power=1.0, normalized=False, pad_mode="replicate", onesided=False),
    dict(power=None, normalized="window", n_fft=20, hop_length=5, win_length=12),   # window shorter than n_fft
]


@pytest.mark.parametrize("shape", [(1, 64), (64,), (1, 2, 50)], ids=str)
@pytest.mark.parametrize("case", SPECTROGRAM_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_torchaudio_spectrogram(case, shape, tmp_path):
    options = {**STFT_LENGTHS, "pad": 0, **case}
    model = Spectrogram(options["win_length"], as_real=case["power"] is None, **options)
    torch.manual_seed(0)
    more = [[torch.randn(3, *shape[1:])]] if len(shape) > 1 else []
    graph = check_model(model, [torch.randn(*shape)], tmp_path, more)
    assert "torchaudio.functional.spectrogram" in {op.type for op in graph.operators}


def test_torchaudio_spectrogram_complex_output(tmp_path):
    # the complex spectrogram itself as the model's output
    graph = check_model(Spectrogram(power=None, normalized=False, pad=0, **STFT_LENGTHS), [torch.randn(2, 40)],
                        tmp_path)
    assert graph.run(np.zeros((2, 40), np.float32))[0].dtype == np.complex64


@pytest.mark.parametrize("case", [dict(normalized=False), dict(normalized="window"),
                                  dict(normalized="frame_length"), dict(normalized=False, center=False),
                                  dict(normalized=False, n_fft=20, hop_length=5, win_length=12)],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_torchaudio_inverse_spectrogram(case, tmp_path):
    options = {**STFT_LENGTHS, "pad": 0, **case}
    model = InverseSpectrogram(options["win_length"], **options)
    stft = dict(n_fft=options["n_fft"], hop_length=options["hop_length"], win_length=options["win_length"],
                window=model.window, center=options.get("center", True), return_complex=True)
    generator = torch.Generator().manual_seed(0)
    spectra = [torch.stft(torch.randn(batch, 64, generator=generator), **stft) for batch in (1, 3)]
    graph = check_model(model, [spectra[0]], tmp_path, [[spectra[1]]])
    assert "torchaudio.functional.inverse_spectrogram" in {op.type for op in graph.operators}


def test_torchaudio_inverse_of_the_spectrogram_is_the_waveform(tmp_path):
    class RoundTrip(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.forward_transform = Spectrogram(power=None, normalized="window", pad=0, **STFT_LENGTHS)
            self.inverse = InverseSpectrogram(normalized="window", pad=0, **STFT_LENGTHS)

        def forward(self, x):
            return self.inverse(self.forward_transform(x))

    x = torch.randn(2, 64)
    graph = check_model(RoundTrip(), [x], tmp_path)
    np.testing.assert_allclose(graph.run(x.numpy())[0], x.numpy(), atol=1e-5)


def test_torchaudio_spectrogram_pads_itself_when_the_file_says_so():
    # pnnx moves spectrogram(pad=3) into an F.pad before it; a file may still hold pad=3
    op = make_operator("torchaudio.functional.spectrogram", [[2, 64], [16]], n_fft=16, hop_length=4, win_length=16,
                       pad=3, power=2, center=True, pad_mode="constant", onesided=True, normalized="window")
    layer = LayerRegisterer.create_layer(op)
    x, window = torch.randn(2, 64), torch.hann_window(16)
    expected = spectrogram(x, 3, window, 16, 4, 16, 2.0, "window", pad_mode="constant")
    np.testing.assert_allclose(layer.forward([x.numpy(), window.numpy()])[0], expected.numpy(), rtol=1e-4, atol=1e-4)
