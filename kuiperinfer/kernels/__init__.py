"""Low-level NumPy kernels the layers are built on: padding, channels-last memory
(:mod:`~kuiperinfer.kernels.layout`), im2col and col2im for (transposed) convolution,
Winograd F(4x4, 3x3) (its compiled form on the float32 tiles: :mod:`.matrix.winograd`),
depthwise convolution as one contraction over strided windows,
pooling windows, sliding windows over any number of axes (3-D convolution and pooling,
fold/unfold, pooling indices), separable interpolation, stable and in-place elementwise functions.

Convolutions compute in NHWC, whatever the layout of their input, and return NHWC arrays
that the layers view as NCHW. Kernels that sweep large arrays many times (pooling taps,
Winograd transforms, im2col columns) work a block of about 1 MB at a time, so that the
repeated passes hit the cache instead of memory."""
