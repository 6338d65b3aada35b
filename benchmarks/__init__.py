"""kuiperinfer against onnxruntime and PyTorch eager, side by side in one run.

    python -m benchmarks [--models resnet18,mobilenetv3,...] [--batches 1,8] [--threads 2]
                         [--runs N] [--warmup W] [--out bench-results/]

The models are written in PyTorch (:mod:`benchmarks.models`) and exported in the run
(pnnx for kuiperinfer, ``torch.onnx.export`` for onnxruntime) into a cache that is
reused. See :mod:`benchmarks.__main__` for how the engines are timed and measured.
"""
