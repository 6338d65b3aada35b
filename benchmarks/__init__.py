"""kuiperinfer against onnxruntime, OpenVINO and PyTorch eager, as their users run them.

    python -m benchmarks [--models resnet18,vit_tiny,...] [--engines kuiperinfer,openvino,...]
                         [--precisions fp32,bf16,int8] [--batches 1,8] [--runs N] [--block B]
                         [--warmup-runs W] [--threads N] [--busy N] [--memory-runs N] [--no-kernels]
                         [--no-agreement] [--out bench-results/] [--cache DIR]
    python -m benchmarks.kernels [-k TEXT] [--rounds N]
    python -m benchmarks.onnxruntime_profile MODEL [--batch N] [--threads N]

The models are written in PyTorch (:mod:`benchmarks.models`; the hand-written networks,
which the tests and tools share, in :mod:`benchmarks.networks`) and exported in the run
(pnnx for kuiperinfer, ``torch.onnx.export`` for onnxruntime and OpenVINO) into a cache
that is reused; the int8 rows' calibration (:mod:`benchmarks.int8`) is made in each run.
OpenVINO is optional: where it does not import, its rows are left out with a note. See
:mod:`benchmarks.__main__` for how the engines are timed and measured,
:mod:`benchmarks.kernels` for the kernel rates printed before the models, and
:mod:`benchmarks.agreement` for the classifiers' top-1 agreement on photos printed after them.
"""
