"""Low-level NumPy kernels the layers are built on: padding, im2col and col2im for
(transposed) convolution, depthwise taps, pooling windows, separable interpolation."""
