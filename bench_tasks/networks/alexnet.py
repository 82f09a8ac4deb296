"""AlexNet as in MXNet 1.x ``example/image-classification/symbols/alexnet.py``.

Krizhevsky, Sutskever, Hinton, "ImageNet classification with deep convolutional neural
networks", NIPS 2012: conv1 with 96 11×11 filters at stride 4 and local response
normalisation (after the ReLU, before pooling), no grouping, 224×224 input.
"""

from __future__ import annotations

import mxnet as mx

from bench_tasks.networks.layers import conv_relu, fc_relu_dropout, flatten, fully_connected, pool


def _lrn(data: mx.sym.Symbol, name: str) -> mx.sym.Symbol:
    return mx.sym.LRN(data=data, name=name, alpha=0.0001, beta=0.75, knorm=2, nsize=5)


def logits(data: mx.sym.Symbol, num_classes: int) -> mx.sym.Symbol:
    body = conv_relu(data, "conv1", 96, kernel=11, stride=4)
    body = pool(_lrn(body, "lrn1"), "pool1", "max", kernel=3, stride=2)
    body = conv_relu(body, "conv2", 256, kernel=5, pad=2)
    body = pool(_lrn(body, "lrn2"), "pool2", "max", kernel=3, stride=2)
    body = conv_relu(body, "conv3", 384, kernel=3, pad=1)
    body = conv_relu(body, "conv4", 384, kernel=3, pad=1)
    body = conv_relu(body, "conv5", 256, kernel=3, pad=1)
    body = pool(body, "pool5", "max", kernel=3, stride=2)
    body = fc_relu_dropout(flatten(body), "fc6", 4096)
    body = fc_relu_dropout(body, "fc7", 4096)
    return fully_connected(body, "fc8", num_classes)
