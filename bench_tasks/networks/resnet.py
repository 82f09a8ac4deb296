"""ResNet v2 (pre-activation) as in MXNet's ``example/image-classification/symbols/resnet.py``, ImageNet form.

He, Zhang, Ren, Sun, "Identity mappings in deep residual networks", 2016: bottleneck
units BN→ReLU→1×1, BN→ReLU→3×3, BN→ReLU→1×1, the first unit of each stage projecting
its pre-activated input with a 1×1 convolution; convolutions without bias; a batch norm
(gamma fixed) on the raw input; stage widths 256, 512, 1024, 2048.
"""

from __future__ import annotations

import mxnet as mx

from bench_tasks.compat import zip_strict
from bench_tasks.networks.layers import (
    BatchNormStyle,
    batch_norm,
    bn_relu,
    conv,
    flatten,
    fully_connected,
    global_avg_pool,
    pool,
    relu,
)

_BN = BatchNormStyle(fix_gamma=False, eps=2e-5)
_INPUT_BN = BatchNormStyle(fix_gamma=True, eps=2e-5)

_STEM_WIDTH = 64
_STAGE_WIDTHS = (256, 512, 1024, 2048)
#: Bottleneck units per stage for each depth.
_UNITS_PER_STAGE = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}


def _bottleneck(data: mx.sym.Symbol, name: str, width: int, stride: int, project: bool) -> mx.sym.Symbol:
    inner = width // 4
    activated = bn_relu(data, f"{name}_pre", _BN)
    body = conv(activated, f"{name}_conv1", inner, kernel=1, bias=False)
    body = bn_relu(body, f"{name}_mid1", _BN)
    body = conv(body, f"{name}_conv2", inner, kernel=3, stride=stride, pad=1, bias=False)
    body = bn_relu(body, f"{name}_mid2", _BN)
    body = conv(body, f"{name}_conv3", width, kernel=1, bias=False)
    if not project:
        return body + data
    # The projection reads the pre-activated input, as in the pre-activation paper.
    return body + conv(activated, f"{name}_shortcut", width, kernel=1, stride=stride, bias=False)


def logits(data: mx.sym.Symbol, num_classes: int, *, num_layers: int = 50) -> mx.sym.Symbol:
    body = batch_norm(data, "input_bn", _INPUT_BN)
    body = conv(body, "conv0", _STEM_WIDTH, kernel=7, stride=2, pad=3, bias=False)
    body = relu(batch_norm(body, "conv0_bn", _BN), "conv0_relu")
    body = pool(body, "pool0", "max", kernel=3, stride=2, pad=1)
    for stage, (units, width) in enumerate(zip_strict(_UNITS_PER_STAGE[num_layers], _STAGE_WIDTHS), 1):
        for unit in range(1, units + 1):
            first = unit == 1
            stride = 2 if first and stage > 1 else 1
            body = _bottleneck(body, f"stage{stage}_unit{unit}", width, stride, project=first)
    body = bn_relu(body, "final", _BN)
    return fully_connected(flatten(global_avg_pool(body)), "fc", num_classes)
