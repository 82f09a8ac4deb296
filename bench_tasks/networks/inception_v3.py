"""Inception-v3 as in MXNet's ``example/image-classification/symbols/inception-v3.py`` (299×299 input).

Szegedy et al., "Rethinking the inception architecture for computer vision", 2015:
factorised convolutions (5×5 as two 3×3, n×n as 1×n and n×1), grid reductions with
parallel stride-2 branches, every convolution without bias followed by batch norm
(gamma fixed) and ReLU; no auxiliary classifier.
"""

from __future__ import annotations

import mxnet as mx

from bench_tasks.networks.layers import BatchNormStyle, Size, conv_bn_relu, flatten, fully_connected, pool

# MXNet's BatchNorm defaults (eps 1e-3), as the classic definition leaves them.
_BN = BatchNormStyle(fix_gamma=True, eps=1e-3)


def _unit(
    data: mx.sym.Symbol, name: str, num_filter: int, kernel: Size = 1, stride: int = 1, pad: Size = 0
) -> mx.sym.Symbol:
    return conv_bn_relu(data, name, num_filter, kernel, stride, pad, style=_BN, bias=False)


def _block_35(data: mx.sym.Symbol, name: str, pool_proj: int) -> mx.sym.Symbol:
    """35×35 module: 1×1; 1×1→5×5; 1×1→3×3→3×3; average pooling→1×1."""
    branch_1x1 = _unit(data, f"{name}_1x1", 64)
    branch_5x5 = _unit(data, f"{name}_5x5_reduce", 48)
    branch_5x5 = _unit(branch_5x5, f"{name}_5x5", 64, kernel=5, pad=2)
    branch_3x3 = _unit(data, f"{name}_3x3_reduce", 64)
    branch_3x3 = _unit(branch_3x3, f"{name}_3x3_0", 96, kernel=3, pad=1)
    branch_3x3 = _unit(branch_3x3, f"{name}_3x3_1", 96, kernel=3, pad=1)
    branch_pool = pool(data, f"{name}_pool", "avg", kernel=3, stride=1, pad=1)
    branch_pool = _unit(branch_pool, f"{name}_pool_proj", pool_proj)
    return mx.sym.Concat(branch_1x1, branch_5x5, branch_3x3, branch_pool, name=f"{name}_concat")


def _reduce_35_to_17(data: mx.sym.Symbol, name: str) -> mx.sym.Symbol:
    branch_3x3 = _unit(data, f"{name}_3x3", 384, kernel=3, stride=2)
    branch_d3x3 = _unit(data, f"{name}_double_3x3_reduce", 64)
    branch_d3x3 = _unit(branch_d3x3, f"{name}_double_3x3_0", 96, kernel=3, pad=1)
    branch_d3x3 = _unit(branch_d3x3, f"{name}_double_3x3_1", 96, kernel=3, stride=2)
    branch_pool = pool(data, f"{name}_pool", "max", kernel=3, stride=2)
    return mx.sym.Concat(branch_3x3, branch_d3x3, branch_pool, name=f"{name}_concat")


def _block_17(data: mx.sym.Symbol, name: str, width_7x7: int) -> mx.sym.Symbol:
    """17×17 module: 1×1; 1×7,7×1; 7×1,1×7,7×1,1×7; average pooling→1×1 (every branch ends at 192)."""
    branch_1x1 = _unit(data, f"{name}_1x1", 192)
    branch_7x7 = _unit(data, f"{name}_7x7_reduce", width_7x7)
    branch_7x7 = _unit(branch_7x7, f"{name}_7x7_0", width_7x7, kernel=(1, 7), pad=(0, 3))
    branch_7x7 = _unit(branch_7x7, f"{name}_7x7_1", 192, kernel=(7, 1), pad=(3, 0))
    branch_d7x7 = _unit(data, f"{name}_double_7x7_reduce", width_7x7)
    branch_d7x7 = _unit(branch_d7x7, f"{name}_double_7x7_0", width_7x7, kernel=(7, 1), pad=(3, 0))
    branch_d7x7 = _unit(branch_d7x7, f"{name}_double_7x7_1", width_7x7, kernel=(1, 7), pad=(0, 3))
    branch_d7x7 = _unit(branch_d7x7, f"{name}_double_7x7_2", width_7x7, kernel=(7, 1), pad=(3, 0))
    branch_d7x7 = _unit(branch_d7x7, f"{name}_double_7x7_3", 192, kernel=(1, 7), pad=(0, 3))
    branch_pool = pool(data, f"{name}_pool", "avg", kernel=3, stride=1, pad=1)
    branch_pool = _unit(branch_pool, f"{name}_pool_proj", 192)
    return mx.sym.Concat(branch_1x1, branch_7x7, branch_d7x7, branch_pool, name=f"{name}_concat")


def _reduce_17_to_8(data: mx.sym.Symbol, name: str) -> mx.sym.Symbol:
    branch_3x3 = _unit(data, f"{name}_3x3_reduce", 192)
    branch_3x3 = _unit(branch_3x3, f"{name}_3x3", 320, kernel=3, stride=2)
    branch_7x7 = _unit(data, f"{name}_7x7_reduce", 192)
    branch_7x7 = _unit(branch_7x7, f"{name}_7x7_0", 192, kernel=(1, 7), pad=(0, 3))
    branch_7x7 = _unit(branch_7x7, f"{name}_7x7_1", 192, kernel=(7, 1), pad=(3, 0))
    branch_7x7 = _unit(branch_7x7, f"{name}_7x7_3x3", 192, kernel=3, stride=2)
    branch_pool = pool(data, f"{name}_pool", "max", kernel=3, stride=2)
    return mx.sym.Concat(branch_3x3, branch_7x7, branch_pool, name=f"{name}_concat")


def _split_1x3_3x1(data: mx.sym.Symbol, name: str) -> list[mx.sym.Symbol]:
    """The 8×8 modules' fork: a 1×3 and a 3×1 convolution side by side, both 384 wide."""
    return [
        _unit(data, f"{name}_1x3", 384, kernel=(1, 3), pad=(0, 1)),
        _unit(data, f"{name}_3x1", 384, kernel=(3, 1), pad=(1, 0)),
    ]


def _block_8(data: mx.sym.Symbol, name: str, pool_type: str) -> mx.sym.Symbol:
    """8×8 module: 1×1; 1×1→(1×3 | 3×1); 1×1→3×3→(1×3 | 3×1); pooling→1×1."""
    branch_1x1 = _unit(data, f"{name}_1x1", 320)
    branch_3x3 = _unit(data, f"{name}_3x3_reduce", 384)
    branch_d3x3 = _unit(data, f"{name}_double_3x3_reduce", 448)
    branch_d3x3 = _unit(branch_d3x3, f"{name}_double_3x3", 384, kernel=3, pad=1)
    branch_pool = pool(data, f"{name}_pool", pool_type, kernel=3, stride=1, pad=1)
    branch_pool = _unit(branch_pool, f"{name}_pool_proj", 192)
    return mx.sym.Concat(
        branch_1x1,
        *_split_1x3_3x1(branch_3x3, f"{name}_3x3"),
        *_split_1x3_3x1(branch_d3x3, f"{name}_double_3x3"),
        branch_pool,
        name=f"{name}_concat",
    )


def logits(data: mx.sym.Symbol, num_classes: int) -> mx.sym.Symbol:
    body = _unit(data, "conv1", 32, kernel=3, stride=2)
    body = _unit(body, "conv2", 32, kernel=3)
    body = _unit(body, "conv3", 64, kernel=3, pad=1)
    body = pool(body, "pool1", "max", kernel=3, stride=2)
    body = _unit(body, "conv4", 80, kernel=1)
    body = _unit(body, "conv5", 192, kernel=3)
    body = pool(body, "pool2", "max", kernel=3, stride=2)
    for index, pool_proj in enumerate((32, 64, 64)):
        body = _block_35(body, f"mixed{index}", pool_proj)
    body = _reduce_35_to_17(body, "mixed3")
    for index, width_7x7 in enumerate((128, 160, 160, 192), 4):
        body = _block_17(body, f"mixed{index}", width_7x7)
    body = _reduce_17_to_8(body, "mixed8")
    body = _block_8(body, "mixed9", "avg")
    body = _block_8(body, "mixed10", "max")
    # An 8×8 average pooling over the 8×8 map (the classic definition's, not global_pool).
    return fully_connected(flatten(pool(body, "global_pool", "avg", kernel=8)), "fc", num_classes)
