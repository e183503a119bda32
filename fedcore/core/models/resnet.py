"""CIFAR-style ResNet-20/56/110 (He et al. 2016) with option-A shortcuts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedcore.core.models import FedModel


def _norm(kind: str, channels: int) -> nn.Module:
    """BatchNorm2d, or GroupNorm(1, C) as in CRAFT's ``replace_bn_with_gn``."""
    return nn.BatchNorm2d(channels) if kind == "batch" else nn.GroupNorm(1, channels)


class ShortcutA(nn.Module):
    """Parameter-free shortcut: stride subsampling plus zero-padding of channels."""

    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.stride, self.extra = stride, planes - in_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Subsample spatially, then pad channels evenly on both sides with zeros."""
        x = x[:, :, :: self.stride, :: self.stride]
        lo = self.extra // 2
        return F.pad(x, (0, 0, 0, 0, lo, self.extra - lo))


class BasicBlock(nn.Module):
    """conv1-bn1-ReLU-conv2-bn2 plus shortcut, then ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _norm(norm, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = _norm(norm, planes)
        down = stride != 1 or in_planes != planes
        self.shortcut = ShortcutA(in_planes, planes, stride) if down else nn.Identity()

    def preact(self, x: torch.Tensor) -> torch.Tensor:
        """Residual sum before the block's final ReLU."""
        out = F.relu(self.bn1(self.conv1(x)))
        pre: torch.Tensor = self.bn2(self.conv2(out)) + self.shortcut(x)
        return pre

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """relu(preact(x))."""
        return F.relu(self.preact(x))


class ResNet(FedModel):
    """3 stages of n blocks (16/32/64 channels), global average pooling, linear head."""

    def __init__(self, n: int, in_shape: tuple[int, int, int], num_classes: int, norm: str):
        super().__init__()
        self.embed_dim = 64
        self.conv1 = nn.Conv2d(in_shape[0], 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = _norm(norm, 16)
        self.layer1 = self._stage(16, 16, n, 1, norm)
        self.layer2 = self._stage(16, 32, n, 2, norm)
        self.layer3 = self._stage(32, 64, n, 2, norm)
        self.head = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    @staticmethod
    def _stage(in_planes: int, planes: int, n: int, stride: int, norm: str) -> nn.Sequential:
        """n blocks; only the first one changes stride/width."""
        blocks = [BasicBlock(in_planes, planes, stride, norm)]
        blocks += [BasicBlock(planes, planes, 1, norm) for _ in range(n - 1)]
        return nn.Sequential(*blocks)

    def _last_preact(self, x: torch.Tensor) -> torch.Tensor:
        """Spatial pre-ReLU map of the last block of layer3, shape (B, 64, h, w)."""
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3[:-1](self.layer2(self.layer1(x)))
        last = self.layer3[-1]
        assert isinstance(last, BasicBlock)
        return last.preact(x)

    def preactivation(self, x: torch.Tensor) -> torch.Tensor:
        """Global-average-pooled pre-ReLU residual sum of ``layer3[-1]``, shape (B, 64).

        ReLU precedes pooling, so features >= relu(preactivation) with equality only when the
        final map is 1x1 or has no sign changes within a channel.
        """
        return self._last_preact(x).mean(dim=(2, 3))

    def oui_units(self, x: torch.Tensor) -> torch.Tensor:
        """The last ReLU's input per channel and position, shape (B, 64 h w): the units of
        FedOUI's OUI (one per entry of the map the ReLU acts on, before pooling)."""
        return self._last_preact(x).flatten(1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Global average of relu(layer3 output), shape (B, 64)."""
        return F.relu(self._last_preact(x)).mean(dim=(2, 3))
