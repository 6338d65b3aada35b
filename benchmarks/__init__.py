"""kuiperinfer against onnxruntime and PyTorch eager, side by side in one run.

    python -m benchmarks [--models resnet18,mobilenetv3,...] [--batches 1,8] [--threads 2]
                         [--runs N] [--warmup W] [--out bench-results/]

The models are written in PyTorch (:mod:`benchmarks.models`) and exported in the run
(pnnx for kuiperinfer, ``torch.onnx.export`` for onnxruntime) into a cache that is
reused. See :mod:`benchmarks.__main__` for how the engines are timed and measured.
"""

import os

# Idle threads sleep instead of spinning, in every engine (read when each runtime starts,
# so set before anything imports torch or numpy); see benchmarks.__main__. PyTorch's
# OpenMP threads:
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# NumPy's OpenBLAS threads, which kuiperinfer's products use: they spin for ~2^28 cycles
# after each product unless told otherwise, and in the interleaved rounds that spinning took
# a core from the engine timed next (onnxruntime's ResNet-18 at batch 1: 25-35 ms median
# with it, 19 ms without; kuiperinfer's own time did not change).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
