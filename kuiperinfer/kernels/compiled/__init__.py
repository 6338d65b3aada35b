"""The compiled twins of the NumPy reference kernels: Numba, through :func:`kuiperinfer.kernels.jit.kernel`.

Each module here computes what a reference kernel of :mod:`kuiperinfer.kernels` computes,
on C-contiguous float32 arrays, releasing the GIL; the tests compare every one with its
reference on edge shapes. Layers take them when the graph's ``kernels`` option is
``"compiled"`` (the default, wherever Numba imported).
:mod:`.spin` holds no twin but the waits of the engine's threads, compiled so that they
spin without the GIL; :mod:`.vectors`, the SIMD vectors the depthwise and direct
convolutions hold their taps and sums in.
"""
