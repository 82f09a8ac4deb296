"""Building blocks shared by the network definitions: conv (+BN) (+ReLU), pooling, the classifier.

Every block names its operators after the ``name`` it is given, so the arguments of a
network read like its architecture (``stage2_unit1_conv1_weight``). Kernels, strides and
pads are given as ``int`` (square) or ``(height, width)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple, Union

import mxnet as mx

Size = Union[int, Tuple[int, int]]  # evaluated at run time: 3.8 spelling
#: A network body: ``(data, num_classes) -> logits``.
LogitsBuilder = Callable[[mx.sym.Symbol, int], mx.sym.Symbol]


def _pair(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else size


@dataclass(frozen=True)
class BatchNormStyle:
    """How a network configures BatchNorm; ``fix_gamma`` keeps gamma at 1 but it stays an argument."""

    fix_gamma: bool
    eps: float
    momentum: float = 0.9


def conv(
    data: mx.sym.Symbol,
    name: str,
    num_filter: int,
    kernel: Size,
    stride: Size = 1,
    pad: Size = 0,
    *,
    bias: bool = True,
) -> mx.sym.Symbol:
    return mx.sym.Convolution(
        data=data,
        name=name,
        num_filter=num_filter,
        kernel=_pair(kernel),
        stride=_pair(stride),
        pad=_pair(pad),
        no_bias=not bias,
    )


def relu(data: mx.sym.Symbol, name: str) -> mx.sym.Symbol:
    return mx.sym.Activation(data=data, act_type="relu", name=name)


def batch_norm(data: mx.sym.Symbol, name: str, style: BatchNormStyle) -> mx.sym.Symbol:
    return mx.sym.BatchNorm(
        data=data, name=name, fix_gamma=style.fix_gamma, eps=style.eps, momentum=style.momentum
    )


def bn_relu(data: mx.sym.Symbol, name: str, style: BatchNormStyle) -> mx.sym.Symbol:
    """BatchNorm then ReLU: the pre-activation of ResNet v2 units."""
    return relu(batch_norm(data, f"{name}_bn", style), f"{name}_relu")


def conv_relu(
    data: mx.sym.Symbol, name: str, num_filter: int, kernel: Size, stride: Size = 1, pad: Size = 0
) -> mx.sym.Symbol:
    """Convolution with bias, then ReLU (AlexNet, VGG, GoogLeNet)."""
    return relu(conv(data, f"{name}_conv", num_filter, kernel, stride, pad), f"{name}_relu")


def conv_bn_relu(
    data: mx.sym.Symbol,
    name: str,
    num_filter: int,
    kernel: Size,
    stride: Size = 1,
    pad: Size = 0,
    *,
    style: BatchNormStyle,
    bias: bool,
) -> mx.sym.Symbol:
    """Convolution, BatchNorm, ReLU (Inception-BN keeps the conv bias, Inception-v3 drops it)."""
    convolved = conv(data, f"{name}_conv", num_filter, kernel, stride, pad, bias=bias)
    return relu(batch_norm(convolved, f"{name}_bn", style), f"{name}_relu")


def pool(
    data: mx.sym.Symbol, name: str, pool_type: str, kernel: Size, stride: Size = 1, pad: Size = 0
) -> mx.sym.Symbol:
    return mx.sym.Pooling(
        data=data, name=name, pool_type=pool_type, kernel=_pair(kernel), stride=_pair(stride), pad=_pair(pad)
    )


def global_avg_pool(data: mx.sym.Symbol, name: str = "global_pool") -> mx.sym.Symbol:
    # The kernel is ignored with global_pool but MXNet still requires one.
    return mx.sym.Pooling(data=data, name=name, pool_type="avg", kernel=(1, 1), global_pool=True)


def flatten(data: mx.sym.Symbol, name: str = "flatten") -> mx.sym.Symbol:
    return mx.sym.Flatten(data=data, name=name)


def fully_connected(data: mx.sym.Symbol, name: str, num_hidden: int) -> mx.sym.Symbol:
    return mx.sym.FullyConnected(data=data, name=name, num_hidden=num_hidden)


def fc_relu_dropout(data: mx.sym.Symbol, name: str, num_hidden: int) -> mx.sym.Symbol:
    """The 4096-wide hidden layers of AlexNet and VGG: FC, ReLU, dropout 0.5."""
    hidden = relu(fully_connected(data, f"{name}_fc", num_hidden), f"{name}_relu")
    return mx.sym.Dropout(data=hidden, p=0.5, name=f"{name}_dropout")


def classifier(logits_of: LogitsBuilder, num_classes: int, dtype: str) -> mx.sym.Symbol:
    """Wrap a network body into the symbol the harness runs: ``data`` in, ``softmax`` out.

    For float16 the input is cast after ``data`` and the logits are cast back to float32
    before the softmax, as MXNet's classic symbols do, so every weight in between is
    float16 while the harness feeds and reads float32.
    """
    data = mx.sym.Variable("data")
    if dtype == "float16":
        data = mx.sym.Cast(data=data, dtype="float16", name="data_float16")
    logits = logits_of(data, num_classes)
    if dtype == "float16":
        logits = mx.sym.Cast(data=logits, dtype="float32", name="logits_float32")
    return mx.sym.SoftmaxOutput(data=logits, name="softmax")
