"""Inception-BN as in MXNet's ``example/image-classification/symbols/inception-bn.py`` (224×224 branch).

Ioffe, Szegedy, "Batch normalization: accelerating deep network training by reducing
internal covariate shift", 2015: GoogLeNet with batch norm after every convolution, the
5×5 branch replaced by two 3×3 convolutions, and stride-2 modules (no 1×1 branch, a
max-pooling pass-through) instead of separate pooling layers between stages.
"""

from __future__ import annotations

from typing import NamedTuple

import mxnet as mx

from bench_tasks.networks.layers import BatchNormStyle, conv_bn_relu, flatten, fully_connected, pool

# The classic definition keeps the convolution bias in front of batch norm, and learns gamma.
_BN = BatchNormStyle(fix_gamma=False, eps=1e-10 + 1e-5)


class Module(NamedTuple):
    """Branch widths of a stride-1 module: 1×1; 1×1→3×3; 1×1→3×3→3×3; 3×3 pooling→1×1."""

    name: str
    c1x1: int
    c3x3_reduce: int
    c3x3: int
    d3x3_reduce: int
    d3x3: int
    pool_type: str
    pool_proj: int


class Reduction(NamedTuple):
    """Branch widths of a stride-2 module: 1×1→3×3/2; 1×1→3×3→3×3/2; 3×3/2 max pooling."""

    name: str
    c3x3_reduce: int
    c3x3: int
    d3x3_reduce: int
    d3x3: int


_MODULES: tuple[Module | Reduction, ...] = (
    Module("3a", 64, 64, 64, 64, 96, "avg", 32),
    Module("3b", 64, 64, 96, 64, 96, "avg", 64),
    Reduction("3c", 128, 160, 64, 96),
    Module("4a", 224, 64, 96, 96, 128, "avg", 128),
    Module("4b", 192, 96, 128, 96, 128, "avg", 128),
    Module("4c", 160, 128, 160, 128, 160, "avg", 128),
    Module("4d", 96, 128, 192, 160, 192, "avg", 128),
    Reduction("4e", 128, 192, 192, 256),
    Module("5a", 352, 192, 320, 160, 224, "avg", 128),
    Module("5b", 352, 192, 320, 192, 224, "max", 128),
)


def _unit(data: mx.sym.Symbol, name: str, num_filter: int, kernel: int, stride: int = 1) -> mx.sym.Symbol:
    return conv_bn_relu(data, name, num_filter, kernel, stride, pad=kernel // 2, style=_BN, bias=True)


def _module(data: mx.sym.Symbol, spec: Module | Reduction) -> mx.sym.Symbol:
    name = spec.name
    stride = 2 if isinstance(spec, Reduction) else 1
    branch_3x3 = _unit(data, f"{name}_3x3_reduce", spec.c3x3_reduce, 1)
    branch_3x3 = _unit(branch_3x3, f"{name}_3x3", spec.c3x3, 3, stride)
    branch_d3x3 = _unit(data, f"{name}_double_3x3_reduce", spec.d3x3_reduce, 1)
    branch_d3x3 = _unit(branch_d3x3, f"{name}_double_3x3_0", spec.d3x3, 3)
    branch_d3x3 = _unit(branch_d3x3, f"{name}_double_3x3_1", spec.d3x3, 3, stride)
    if isinstance(spec, Reduction):
        pass_through = pool(data, f"{name}_pool", "max", kernel=3, stride=2, pad=1)
        return mx.sym.Concat(branch_3x3, branch_d3x3, pass_through, name=f"{name}_concat")
    branch_1x1 = _unit(data, f"{name}_1x1", spec.c1x1, 1)
    branch_pool = pool(data, f"{name}_pool", spec.pool_type, kernel=3, stride=1, pad=1)
    branch_pool = _unit(branch_pool, f"{name}_pool_proj", spec.pool_proj, 1)
    return mx.sym.Concat(branch_1x1, branch_3x3, branch_d3x3, branch_pool, name=f"{name}_concat")


def logits(data: mx.sym.Symbol, num_classes: int) -> mx.sym.Symbol:
    body = conv_bn_relu(data, "conv1", 64, kernel=7, stride=2, pad=3, style=_BN, bias=True)
    body = pool(body, "pool1", "max", kernel=3, stride=2)
    body = _unit(body, "conv2_reduce", 64, 1)
    body = _unit(body, "conv2", 192, 3)
    body = pool(body, "pool2", "max", kernel=3, stride=2)
    for spec in _MODULES:
        body = _module(body, spec)
    # A 7×7 average pooling over the 7×7 map (the classic definition's, not global_pool).
    return fully_connected(flatten(pool(body, "global_pool", "avg", kernel=7)), "fc", num_classes)
