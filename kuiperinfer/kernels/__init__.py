"""Low-level NumPy kernels the layers are built on (padding, im2col, pooling windows)."""
