"""VGG as in MXNet's ``example/image-classification/symbols/vgg.py`` (without batch norm).

Simonyan, Zisserman, "Very deep convolutional networks for large-scale image
recognition", 2014: stacks of 3×3 convolutions, each stack ending in 2×2 max pooling,
then two 4096-wide hidden layers.
"""

from __future__ import annotations

import mxnet as mx

from bench_tasks.compat import zip_strict
from bench_tasks.networks.layers import conv_relu, fc_relu_dropout, flatten, fully_connected, pool

#: Convolutions per stack for each depth; stack widths are the same for every depth.
_CONVS_PER_STACK = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
_STACK_WIDTHS = (64, 128, 256, 512, 512)


def logits(data: mx.sym.Symbol, num_classes: int, *, num_layers: int = 16) -> mx.sym.Symbol:
    body = data
    for stack, (convs, width) in enumerate(zip_strict(_CONVS_PER_STACK[num_layers], _STACK_WIDTHS), 1):
        for index in range(1, convs + 1):
            body = conv_relu(body, f"conv{stack}_{index}", width, kernel=3, pad=1)
        body = pool(body, f"pool{stack}", "max", kernel=2, stride=2)
    body = fc_relu_dropout(flatten(body), "fc6", 4096)
    body = fc_relu_dropout(body, "fc7", 4096)
    return fully_connected(body, "fc8", num_classes)
