"""Low-level NumPy kernels the layers are built on: padding, im2col and col2im for
(transposed) convolution, Winograd F(4x4, 3x3), depthwise convolution by banded products,
pooling windows, separable interpolation, stable and in-place elementwise functions.

Kernels that sweep large arrays many times (pooling taps, depthwise kernel rows, Winograd
transforms, im2col columns) work a block of about 1 MB at a time, so that the repeated
passes hit the cache instead of memory."""
