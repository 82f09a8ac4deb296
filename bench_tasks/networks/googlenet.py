"""GoogLeNet as in MXNet's ``example/image-classification/symbols/googlenet.py``.

Szegedy et al., "Going deeper with convolutions", 2014: nine inception modules of four
branches (1×1; 1×1→3×3; 1×1→5×5; 3×3 pooling→1×1), convolutions with bias and ReLU,
no batch norm, no auxiliary classifiers, global average pooling into the classifier.
"""

from __future__ import annotations

from typing import NamedTuple

import mxnet as mx

from bench_tasks.networks.layers import conv_relu, flatten, fully_connected, global_avg_pool, pool


class Inception(NamedTuple):
    """Branch widths of one inception module (the 3×3 pooling branch is always max)."""

    name: str
    c1x1: int
    c3x3_reduce: int
    c3x3: int
    c5x5_reduce: int
    c5x5: int
    pool_proj: int


_STAGES: tuple[tuple[Inception, ...], ...] = (
    (
        Inception("in3a", 64, 96, 128, 16, 32, 32),
        Inception("in3b", 128, 128, 192, 32, 96, 64),
    ),
    (
        Inception("in4a", 192, 96, 208, 16, 48, 64),
        Inception("in4b", 160, 112, 224, 24, 64, 64),
        Inception("in4c", 128, 128, 256, 24, 64, 64),
        Inception("in4d", 112, 144, 288, 32, 64, 64),
        Inception("in4e", 256, 160, 320, 32, 128, 128),
    ),
    (
        Inception("in5a", 256, 160, 320, 32, 128, 128),
        Inception("in5b", 384, 192, 384, 48, 128, 128),
    ),
)


def _inception(data: mx.sym.Symbol, spec: Inception) -> mx.sym.Symbol:
    name = spec.name
    branch_1x1 = conv_relu(data, f"{name}_1x1", spec.c1x1, kernel=1)
    branch_3x3 = conv_relu(data, f"{name}_3x3_reduce", spec.c3x3_reduce, kernel=1)
    branch_3x3 = conv_relu(branch_3x3, f"{name}_3x3", spec.c3x3, kernel=3, pad=1)
    branch_5x5 = conv_relu(data, f"{name}_5x5_reduce", spec.c5x5_reduce, kernel=1)
    branch_5x5 = conv_relu(branch_5x5, f"{name}_5x5", spec.c5x5, kernel=5, pad=2)
    branch_pool = pool(data, f"{name}_pool", "max", kernel=3, stride=1, pad=1)
    branch_pool = conv_relu(branch_pool, f"{name}_pool_proj", spec.pool_proj, kernel=1)
    return mx.sym.Concat(branch_1x1, branch_3x3, branch_5x5, branch_pool, name=f"{name}_concat")


def logits(data: mx.sym.Symbol, num_classes: int) -> mx.sym.Symbol:
    body = conv_relu(data, "conv1", 64, kernel=7, stride=2, pad=3)
    body = pool(body, "pool1", "max", kernel=3, stride=2)
    body = conv_relu(body, "conv2", 64, kernel=1)
    body = conv_relu(body, "conv3", 192, kernel=3, pad=1)
    for stage_number, stage in enumerate(_STAGES, 2):
        # Each stage starts with a stride-2 max pooling.
        body = pool(body, f"pool{stage_number}", "max", kernel=3, stride=2)
        for spec in stage:
            body = _inception(body, spec)
    return fully_connected(flatten(global_avg_pool(body)), "fc", num_classes)
