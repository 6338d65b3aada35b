"""Whole networks against PyTorch: ResNet-18, MobileNetV3-Small, YOLOv5s, UNet and a small ViT.

Their PyTorch definitions are in benchmarks/networks.py.
"""
