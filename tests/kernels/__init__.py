"""Tests of kuiperinfer/kernels, one file per kernel module (test_<module>.py).

A package, so that its module names may repeat those of tests/layers (test_pooling.py).
"""
