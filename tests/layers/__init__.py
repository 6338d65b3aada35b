"""Tests of kuiperinfer/layers, one file per layer module (test_<module>.py).

A package, so that its module names may repeat those of tests/kernels (test_pooling.py).
"""
