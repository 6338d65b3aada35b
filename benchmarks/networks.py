"""Networks written by hand in PyTorch (no torchvision here), for the benchmarks, the tests
and tools/network_errors.py, and how an engine's outputs are held to PyTorch's
(``torch_outputs``, ``ATOL`` and ``RTOL``).

Weights are random; BatchNorm running statistics and affine parameters are
randomised so that no normalisation is the identity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ATOL = 1e-4
RTOL = 1e-3
"""An engine's outputs match PyTorch's within ATOL absolute, or RTOL relative on large values."""


def torch_outputs(model: nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """The model's outputs as arrays, tuples and lists flattened in order."""
    with torch.no_grad():
        result = model(*inputs)
    flat: list[np.ndarray] = []

    def walk(value):
        if isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        else:
            flat.append(value.detach().resolve_conj().numpy())  # ihfft returns a lazy conjugate

    walk(result)
    return flat


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(m.num_features, generator=generator) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=generator) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=generator) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=generator) - 0.5)
    return model.eval()


# --------------------------------------------------------------------------- ResNet-18


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's resnet18 layout: stem, four stages of two BasicBlocks, pool, fc."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(seed: int = 0) -> ResNet18:
    torch.manual_seed(seed)
    return randomize_batchnorm(ResNet18(), seed)


# --------------------------------------------------------------------------- MobileNetV3-Small


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to a multiple of ``divisor``, never more than 10% below it (torchvision)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNActivation(nn.Sequential):
    """Conv2d (no bias) + BatchNorm2d + an optional activation, "same" padding."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1,
                 activation: type[nn.Module] | None = nn.ReLU):
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout, eps=0.001, momentum=0.01),
        ]
        if activation is not None:
            layers.append(activation())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Channel attention: global average, 1x1 conv down, ReLU, 1x1 conv up, Hardsigmoid, scale."""

    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.relu(self.fc1(self.avgpool(x)))))
        return scale * x


class InvertedResidual(nn.Module):
    """MobileNetV3 block: 1x1 expand, depthwise kxk, optional SE, 1x1 project, residual."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool,
                 activation: type[nn.Module], stride: int):
        super().__init__()
        self.use_residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNActivation(cin, expanded, 1, activation=activation))
        layers.append(ConvBNActivation(expanded, expanded, kernel, stride, groups=expanded,
                                       activation=activation))
        if use_se:
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4)))
        layers.append(ConvBNActivation(expanded, cout, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_residual else out


# (input channels, kernel, expanded channels, output channels, SE, activation, stride)
MOBILENET_V3_SMALL = (
    (16, 3, 16, 16, True, nn.ReLU, 2),
    (16, 3, 72, 24, False, nn.ReLU, 2),
    (24, 3, 88, 24, False, nn.ReLU, 1),
    (24, 5, 96, 40, True, nn.Hardswish, 2),
    (40, 5, 240, 40, True, nn.Hardswish, 1),
    (40, 5, 240, 40, True, nn.Hardswish, 1),
    (40, 5, 120, 48, True, nn.Hardswish, 1),
    (48, 5, 144, 48, True, nn.Hardswish, 1),
    (48, 5, 288, 96, True, nn.Hardswish, 2),
    (96, 5, 576, 96, True, nn.Hardswish, 1),
    (96, 5, 576, 96, True, nn.Hardswish, 1),
)


class MobileNetV3Small(nn.Module):
    """torchvision's mobilenet_v3_small layout: stem, 11 inverted residuals, 1x1 conv, classifier."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        blocks = [InvertedResidual(*config) for config in MOBILENET_V3_SMALL]
        last = 6 * MOBILENET_V3_SMALL[-1][3]
        self.features = nn.Sequential(
            ConvBNActivation(3, 16, 3, 2, activation=nn.Hardswish),
            *blocks,
            ConvBNActivation(MOBILENET_V3_SMALL[-1][3], last, 1, activation=nn.Hardswish),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(1024, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_small(seed: int = 0) -> MobileNetV3Small:
    torch.manual_seed(seed)
    return randomize_batchnorm(MobileNetV3Small(), seed)


# --------------------------------------------------------------------------- YOLOv5s (v6.0)


class Conv(nn.Module):
    """yolov5's Conv: Conv2d (no bias, "same" padding) + BatchNorm2d + SiLU."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1,
                 padding: int | None = None):
        super().__init__()
        padding = kernel // 2 if padding is None else padding
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """1x1 Conv, 3x3 Conv, and a residual add when ``shortcut``."""

    def __init__(self, channels: int, shortcut: bool):
        super().__init__()
        self.cv1 = Conv(channels, channels, 1)
        self.cv2 = Conv(channels, channels, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with three convolutions: two branches, ``n`` Bottlenecks on one, cat, 1x1."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True):
        super().__init__()
        hidden = cout // 2
        self.cv1 = Conv(cin, hidden, 1)
        self.cv2 = Conv(cin, hidden, 1)
        self.cv3 = Conv(2 * hidden, cout, 1)
        self.m = nn.Sequential(*(Bottleneck(hidden, shortcut) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: one 5x5 max pool applied three times, concatenated."""

    def __init__(self, cin: int, cout: int, kernel: int = 5):
        super().__init__()
        hidden = cin // 2
        self.cv1 = Conv(cin, hidden, 1)
        self.cv2 = Conv(4 * hidden, cout, 1)
        self.m = nn.MaxPool2d(kernel, 1, kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


YOLO_ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))


class Detect(nn.Module):
    """yolov5's Detect head at inference: 1x1 convs, sigmoid, and the box decode.

    For each level: xy = (2 sigmoid - 0.5 + cell) * stride, wh = (2 sigmoid)^2 * anchor,
    the rest (objectness, classes) is the sigmoid. The grid is built in ``forward``
    from arange/meshgrid, as yolov5's ``_make_grid`` does.
    """

    def __init__(self, classes: int, channels: tuple[int, ...], strides: tuple[int, ...]):
        super().__init__()
        self.classes = classes
        self.no = classes + 5
        self.na = len(YOLO_ANCHORS[0]) // 2
        self.strides = strides
        # anchor sizes in pixels (yolov5 keeps them in cells and multiplies by the stride)
        anchors = torch.tensor(YOLO_ANCHORS, dtype=torch.float32).view(len(strides), self.na, 2)
        self.register_buffer("anchors", anchors)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)

    def make_grid(self, nx: int, ny: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cell offsets (minus 0.5) and anchor sizes, both of shape (1, na, ny, nx, 2)."""
        shape = 1, self.na, ny, nx, 2
        yv, xv = torch.meshgrid(torch.arange(ny, dtype=torch.float32),
                                torch.arange(nx, dtype=torch.float32), indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5
        anchor_grid = self.anchors[i].view(1, self.na, 1, 1, 2).expand(shape)
        return grid, anchor_grid

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        z = []
        for i, (conv, x) in enumerate(zip(self.m, features)):
            x = conv(x)
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            grid, anchor_grid = self.make_grid(nx, ny, i)
            xy, wh, conf = x.sigmoid().split((2, 2, self.classes + 1), 4)
            xy = (xy * 2 + grid) * self.strides[i]
            wh = (wh * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class YOLOv5(nn.Module):
    """yolov5 v6.0 (yolov5s.yaml) with width and depth multiples: backbone, PANet neck, Detect."""

    def __init__(self, width: float = 0.50, depth: float = 0.33, classes: int = 80):
        super().__init__()

        def ch(c: int) -> int:
            return math.ceil(c * width / 8) * 8

        def n(count: int) -> int:
            return max(round(count * depth), 1)

        # backbone
        self.b0 = Conv(3, ch(64), 6, 2, 2)
        self.b1 = Conv(ch(64), ch(128), 3, 2)
        self.b2 = C3(ch(128), ch(128), n(3))
        self.b3 = Conv(ch(128), ch(256), 3, 2)
        self.b4 = C3(ch(256), ch(256), n(6))                 # P3/8
        self.b5 = Conv(ch(256), ch(512), 3, 2)
        self.b6 = C3(ch(512), ch(512), n(9))                 # P4/16
        self.b7 = Conv(ch(512), ch(1024), 3, 2)
        self.b8 = C3(ch(1024), ch(1024), n(3))
        self.b9 = SPPF(ch(1024), ch(1024), 5)                # P5/32
        # head
        self.h10 = Conv(ch(1024), ch(512), 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h13 = C3(ch(1024), ch(512), n(3), shortcut=False)
        self.h14 = Conv(ch(512), ch(256), 1)
        self.h17 = C3(ch(512), ch(256), n(3), shortcut=False)   # P3 out
        self.h18 = Conv(ch(256), ch(256), 3, 2)
        self.h20 = C3(ch(512), ch(512), n(3), shortcut=False)   # P4 out
        self.h21 = Conv(ch(512), ch(512), 3, 2)
        self.h23 = C3(ch(1024), ch(1024), n(3), shortcut=False)  # P5 out
        self.detect = Detect(classes, (ch(256), ch(512), ch(1024)), (8, 16, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        h10 = self.h10(p5)
        h14 = self.h14(self.h13(torch.cat((self.up(h10), p4), 1)))
        out3 = self.h17(torch.cat((self.up(h14), p3), 1))
        out4 = self.h20(torch.cat((self.h18(out3), h14), 1))
        out5 = self.h23(torch.cat((self.h21(out4), h10), 1))
        return self.detect([out3, out4, out5])


def yolov5s(seed: int = 0) -> YOLOv5:
    torch.manual_seed(seed)
    return randomize_batchnorm(YOLOv5(0.50, 0.33), seed)


# --------------------------------------------------------------------------- UNet


class DoubleConv(nn.Sequential):
    """(Conv2d 3x3 no bias, BatchNorm2d, ReLU) twice."""

    def __init__(self, cin: int, cout: int, mid: int | None = None):
        mid = mid or cout
        super().__init__(
            nn.Conv2d(cin, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )


class Down(nn.Sequential):
    """2x2 max pool, then DoubleConv."""

    def __init__(self, cin: int, cout: int):
        super().__init__(nn.MaxPool2d(2), DoubleConv(cin, cout))


class Up(nn.Module):
    """Upsample by 2 (bilinear, or a 2x2 ConvTranspose2d), pad to the skip, cat, DoubleConv."""

    def __init__(self, cin: int, cout: int, bilinear: bool):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(cin, cout, cin // 2)
        else:
            self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
            self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = self.up(x)
        dy, dx = skip.size(2) - x.size(2), skip.size(3) - x.size(3)
        x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(nn.Module):
    """The original UNet's layout (as in milesial/Pytorch-UNet), ``base`` channels at the top."""

    def __init__(self, channels: int = 3, classes: int = 2, bilinear: bool = False, base: int = 64):
        super().__init__()
        self.bilinear = bilinear
        factor = 2 if bilinear else 1
        self.inc = DoubleConv(channels, base)
        self.down1 = Down(base, 2 * base)
        self.down2 = Down(2 * base, 4 * base)
        self.down3 = Down(4 * base, 8 * base)
        self.down4 = Down(8 * base, 16 * base // factor)
        self.up1 = Up(16 * base, 8 * base // factor, bilinear)
        self.up2 = Up(8 * base, 4 * base // factor, bilinear)
        self.up3 = Up(4 * base, 2 * base // factor, bilinear)
        self.up4 = Up(2 * base, base, bilinear)
        self.outc = nn.Conv2d(base, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.up1(self.down4(x4), x4)
        x = self.up3(self.up2(x, x3), x2)
        return self.outc(self.up4(x, x1))


def unet(bilinear: bool, base: int = 64, seed: int = 0) -> UNet:
    torch.manual_seed(seed)
    return randomize_batchnorm(UNet(bilinear=bilinear, base=base), seed)


# --------------------------------------------------------------------------- transformers


def randomize_transformer(model: nn.Module, seed: int = 0) -> nn.Module:
    """LayerNorm affine parameters and biases away from their initial 1 and 0, so that none is the identity."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=generator) + 0.5)
                m.bias.copy_((torch.rand(m.bias.shape, generator=generator) - 0.5) * 0.2)
            elif isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.copy_((torch.rand(m.bias.shape, generator=generator) - 0.5) * 0.2)
    return model.eval()


class SelfAttention(nn.Module):
    """Multi-head self-attention as timm writes it: one Linear for q, k and v, reshape/permute,
    ``q @ k^T * scale``, softmax, ``@ v``; ``bias`` (N, 1, 1, L) is added to the scores (a key mask)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if bias is not None:
            scores = scores + bias
        x = scores.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class ViTBlock(nn.Module):
    """Pre-norm transformer block: x + attention(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """timm's ViT layout: patch embedding by a strided Conv2d, class token, position embedding,
    pre-norm blocks, final LayerNorm, linear head on the class token."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
                 hidden: int = 768, classes: int = 1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_tiny(seed: int = 0) -> VisionTransformer:
    """ViT-Tiny/16 at 224x224: embed 192, depth 12, 3 heads, MLP 768."""
    torch.manual_seed(seed)
    return randomize_transformer(VisionTransformer(), seed)


class EncoderLayer(nn.Module):
    """BERT's post-norm layer: LN(x + attention(x)), then LN(x + FFN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.attn = SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, bias))
        return self.norm2(x + self.ffn(x))


class SentenceEncoder(nn.Module):
    """A MiniLM-sized sentence encoder (BERT layout): token and position embeddings, LayerNorm,
    post-norm encoder layers whose attention ignores masked keys, mean pooling over the
    unmasked tokens to one embedding per sentence."""

    def __init__(self, vocab: int = 30522, length: int = 32, dim: int = 384, depth: int = 6, heads: int = 12,
                 hidden: int = 1536):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.randn(1, length, dim) * 0.02)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, hidden) for _ in range(depth))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(torch.float32)
        bias = (1.0 - mask[:, None, None, :]) * -10000.0
        x = self.norm(self.tokens(input_ids) + self.positions)
        for layer in self.layers:
            x = layer(x, bias)
        weights = mask.unsqueeze(-1)
        return (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def minilm(seed: int = 0) -> SentenceEncoder:
    """MiniLM-L6's size: 6 layers, hidden 384, 12 heads, intermediate 1536, vocabulary 30522, 32 tokens."""
    torch.manual_seed(seed)
    return randomize_transformer(SentenceEncoder(), seed)


# --------------------------------------------------------------------------- a small ViT, three attentions


class HandAttention(nn.Module):
    """Multi-head self-attention from a Linear qkv projection (timm's layout)."""

    def __init__(self, embed: int, heads: int, fused: bool):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.scale = (embed // heads) ** -0.5
        self.qkv = nn.Linear(embed, 3 * embed)
        self.proj = nn.Linear(embed, embed)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.scale
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class TorchAttention(nn.Module):
    """nn.MultiheadAttention used for self-attention."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class SmallViTBlock(nn.Module):
    def __init__(self, attention: str, embed: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(embed, eps=1e-6)
        self.attn = (TorchAttention(embed, heads) if attention == "mha"
                     else HandAttention(embed, heads, fused=attention == "sdpa"))
        self.norm2 = nn.LayerNorm(embed, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(embed, 2 * embed), nn.GELU(), nn.Linear(2 * embed, embed))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SmallViT(nn.Module):
    """A small vision transformer: patch embedding (a Conv2d with stride = patch size), tokens by
    flatten + transpose, a class token expanded to the batch and concatenated, a position
    embedding, pre-norm blocks (LayerNorm -> attention -> residual, LayerNorm -> Linear/GELU/Linear
    -> residual), a final LayerNorm and a linear head on the class token. The attention is
    nn.MultiheadAttention (``mha``), or written by hand (``hand``: Linear qkv, reshape/permute,
    matmul, softmax), or F.scaled_dot_product_attention (``sdpa``)."""

    IMAGE, PATCH, CHANNELS, EMBED, HEADS, DEPTH, CLASSES = 32, 8, 3, 32, 4, 2, 10

    def __init__(self, attention: str):
        super().__init__()
        tokens = (self.IMAGE // self.PATCH) ** 2 + 1
        self.patch_embed = nn.Conv2d(self.CHANNELS, self.EMBED, self.PATCH, stride=self.PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, self.EMBED) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, self.EMBED) * 0.02)
        self.blocks = nn.Sequential(*[SmallViTBlock(attention, self.EMBED, self.HEADS) for _ in range(self.DEPTH)])
        self.norm = nn.LayerNorm(self.EMBED, eps=1e-6)
        self.head = nn.Linear(self.EMBED, self.CLASSES)
        with torch.no_grad():  # non-trivial LayerNorm affine and attention biases
            for name, p in self.named_parameters():
                if name.endswith(("norm1.weight", "norm2.weight", "norm.weight")):
                    p.uniform_(0.5, 1.5)
                elif name.endswith("bias"):
                    p.normal_(0, 0.1)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def small_vit(attention: str, seed: int = 0) -> SmallViT:
    torch.manual_seed(seed)
    return SmallViT(attention).eval()
