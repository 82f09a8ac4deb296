"""The classic MXNet image-classification networks, built as MXNet symbols.

These are this project's own definitions of the networks of MXNet's
``example/image-classification/symbols`` (not the Gluon model-zoo variants, which are
different networks), so throughputs are comparable with figures published with MXNet's
harness. Parameter counts equal those definitions' exactly (see tests/integration/worker/test_networks.py).

Interface (used by bench_tasks.measure and the ``describe`` command):
``get_symbol(name, num_classes=1000, dtype="float32")`` returns the symbol ending in
``SoftmaxOutput`` named ``softmax`` with inputs ``data`` and ``softmax_label``;
``image_shape(name)`` returns (C, H, W); ``parameter_count(name)`` and ``describe(name)``.

Importing this package does not import mxnet (the orchestrator imports ``bench_tasks``):
the network modules, which do, are imported when a symbol is first built.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from bench_tasks.compat import zip_strict
from bench_tasks.constants import DTYPES, NETWORKS, NUM_CLASSES

if TYPE_CHECKING:
    import mxnet as mx

#: Inputs of every symbol that are not parameters of the network.
INPUT_NAMES: tuple[str, ...] = ("data", "softmax_label")

_CLASSIC_SYMBOLS = "apache/mxnet example/image-classification/symbols"


@dataclass(frozen=True)
class _Definition:
    module: str  # under bench_tasks.networks
    image_shape: tuple[int, int, int]
    reference: str  # the classic definition (file, options) this one reproduces
    options: dict[str, Any] = field(default_factory=dict)


_IMAGENET = (3, 224, 224)
_DEFINITIONS: dict[str, _Definition] = {
    "alexnet": _Definition("alexnet", _IMAGENET, f"{_CLASSIC_SYMBOLS}/alexnet.py"),
    "vgg-16": _Definition("vgg", _IMAGENET, f"{_CLASSIC_SYMBOLS}/vgg.py num_layers=16", {"num_layers": 16}),
    "googlenet": _Definition("googlenet", _IMAGENET, f"{_CLASSIC_SYMBOLS}/googlenet.py"),
    "inception-bn": _Definition("inception_bn", _IMAGENET, f"{_CLASSIC_SYMBOLS}/inception-bn.py"),
    "inception-v3": _Definition("inception_v3", (3, 299, 299), f"{_CLASSIC_SYMBOLS}/inception-v3.py"),
    "resnet-50": _Definition(
        "resnet", _IMAGENET, f"{_CLASSIC_SYMBOLS}/resnet.py num_layers=50", {"num_layers": 50}
    ),
    "resnet-152": _Definition(
        "resnet", _IMAGENET, f"{_CLASSIC_SYMBOLS}/resnet.py num_layers=152", {"num_layers": 152}
    ),
}


def _definition(name: str) -> _Definition:
    if name not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}; got {name!r}")
    return _DEFINITIONS[name]


def _check_build_options(num_classes: int, dtype: str) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer; got {num_classes!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")


def image_shape(name: str) -> tuple[int, int, int]:
    """(channels, height, width) of one input image of the network."""
    return _definition(name).image_shape


def image_shape_text(name: str) -> str:
    """The image shape as the result record writes it: ``C,H,W``."""
    return ",".join(str(size) for size in image_shape(name))


def get_symbol(name: str, num_classes: int = NUM_CLASSES, dtype: str = "float32") -> mx.sym.Symbol:
    """The network as a training/scoring symbol: ``data`` → … → ``SoftmaxOutput`` named ``softmax``."""
    definition = _definition(name)
    _check_build_options(num_classes, dtype)
    layers = importlib.import_module(f"{__name__}.layers")
    network = importlib.import_module(f"{__name__}.{definition.module}")
    return layers.classifier(partial(network.logits, **definition.options), num_classes, dtype)


def _parameter_shapes(
    symbol: mx.sym.Symbol, shape: tuple[int, int, int]
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """Shapes of the learnable arguments and of the auxiliary states, for a batch of one."""
    argument_shapes, _, aux_shapes = symbol.infer_shape(data=(1, *shape))
    arguments = {
        arg: tuple(arg_shape)
        for arg, arg_shape in zip_strict(symbol.list_arguments(), argument_shapes)
        if arg not in INPUT_NAMES
    }
    aux = {
        state: tuple(state_shape)
        for state, state_shape in zip_strict(symbol.list_auxiliary_states(), aux_shapes)
    }
    return arguments, aux


def parameter_count(name: str, num_classes: int = NUM_CLASSES) -> int:
    """Elements in every argument except the input and the label.

    BatchNorm gamma and beta count, also where gamma is fixed (it is still an argument);
    moving mean and variance do not (they are auxiliary states).
    """
    arguments, _ = _parameter_shapes(get_symbol(name, num_classes), image_shape(name))
    return sum(math.prod(shape) for shape in arguments.values())


def describe(name: str, num_classes: int = NUM_CLASSES) -> dict[str, Any]:
    """What ``python -m bench_tasks describe --network NAME`` prints (JSON-ready)."""
    definition = _definition(name)
    symbol = get_symbol(name, num_classes)
    arguments, aux = _parameter_shapes(symbol, definition.image_shape)
    _, (output_shape,), _ = symbol.infer_shape(data=(1, *definition.image_shape))
    return {
        "network": name,
        "image_shape": image_shape_text(name),
        "num_classes": num_classes,
        "parameters": sum(math.prod(shape) for shape in arguments.values()),
        "arguments": len(arguments),  # parameter arrays: symbol arguments other than data and label
        "aux_states": len(aux),
        "aux_state_elements": sum(math.prod(shape) for shape in aux.values()),
        "inputs": list(INPUT_NAMES),
        "output": "softmax",
        "output_shape": list(output_shape),  # for a batch of one
        "dtypes": list(DTYPES),
        "reference": definition.reference,
    }
