"""A fingerprint of a network's graph that ignores names, to tell whether two symbols are the same network.

Standard library only: the test of the networks runs it in the worker interpreter on
MXNet symbols, and the reference figures in tests/integration/worker/test_networks.py were produced with it
from MXNet's own definitions. Two symbols get the same fingerprint when their graphs,
serialised in MXNet's topological order, have the same operators with the same
architecture attributes (kernel, stride, pad, filters, pooling, BatchNorm settings,
dropout, casts...) wired the same way. Names, workspace sizes and ``identity`` copies
(which MXNet's float32 ResNet and Inception-v3 put after ``data``; no computation)
do not count.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Attribute values MXNet assumes when a definition leaves them out.
_DEFAULTS = {
    "Convolution": {"pad": "(0, 0)", "stride": "(1, 1)", "no_bias": "False"},
    "Pooling": {"pad": "(0, 0)", "stride": "(1, 1)", "global_pool": "False"},
    "BatchNorm": {"eps": "0.001", "momentum": "0.9", "fix_gamma": "True"},
}
_ARCHITECTURE_ATTRIBUTES = {
    "kernel", "stride", "pad", "num_filter", "no_bias", "pool_type", "global_pool", "fix_gamma", "eps",
    "momentum", "act_type", "num_hidden", "alpha", "beta", "knorm", "nsize", "p", "dtype",
}  # fmt: skip
_COPIES = ("identity", "_copy")


def canonical_graph(symbol_json: str) -> list[list[Any]]:
    """The graph as ``[op, sorted attributes, [[input position, output index], ...]]`` per node."""
    kept: list[tuple[int, str, list[tuple[str, str]], list[tuple[int, int]]]] = []
    forwarded: dict[int, tuple[int, int]] = {}
    for index, node in enumerate(json.loads(symbol_json)["nodes"]):
        inputs = [forwarded.get(source, (source, output)) for source, output, *_ in node["inputs"]]
        if node["op"] in _COPIES:
            forwarded[index] = inputs[0]
            continue
        # Variables carry a copy of their operator's attributes: only the operator's count.
        attrs = {} if node["op"] == "null" else {**_DEFAULTS.get(node["op"], {}), **node.get("attrs", {})}
        if attrs.get("global_pool") == "True":
            attrs.pop("kernel", None)  # ignored by MXNet with global_pool
        kept.append(
            (index, node["op"], sorted(i for i in attrs.items() if i[0] in _ARCHITECTURE_ATTRIBUTES), inputs)
        )
    position = {index: n for n, (index, *_) in enumerate(kept)}
    return [[op, attrs, [[position[s], o] for s, o in inputs]] for _, op, attrs, inputs in kept]


def fingerprint(symbol_json: str) -> str:
    """sha256 of the canonical graph of ``symbol.tojson()``."""
    return hashlib.sha256(json.dumps(canonical_graph(symbol_json)).encode()).hexdigest()
