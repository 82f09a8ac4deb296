"""The network definitions: shapes, parameter counts equal to MXNet's classic symbols, float16, bad names.

Everything that needs MXNet runs in one subprocess of the worker interpreter
(``.venv-bench``) that reports on all networks at once as JSON; the rest runs here, in the
orchestrator's interpreter, which has no MXNet: that is how it imports ``bench_tasks``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_tasks import networks
from bench_tasks.constants import DTYPES, NETWORKS
from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python

# Parameter counts of MXNet's own definitions, apache/mxnet (v1.x)
# example/image-classification/symbols/{alexnet,vgg,googlenet,inception-bn,inception-v3,resnet}.py,
# get_symbol(num_classes=1000) with num_layers 16 / 50 / 152 and image_shape 3,224,224 where
# they take them: computed by running those files with MXNet 1.9.1 (infer_shape for a batch of
# one; every argument except data and softmax_label). VGG-16 and ResNet-50 agree with the
# usual published 138.36 M and 25.5 M.
REFERENCE_PARAMETERS = {
    "alexnet": 50_844_008,
    "vgg-16": 138_357_544,
    "googlenet": 6_998_552,
    "inception-bn": 11_295_240,
    "inception-v3": 23_834_568,
    "resnet-50": 25_549_486,
    "resnet-152": 60_185_262,
}
# Parameter arrays (symbol arguments other than data and label) of the same definitions.
REFERENCE_ARGUMENTS = {
    "alexnet": 16,
    "vgg-16": 32,
    "googlenet": 116,
    "inception-bn": 278,
    "inception-v3": 284,
    "resnet-50": 157,
    "resnet-152": 463,
}

# Fingerprints (tests/support/network_fingerprint.py: operators, architecture attributes and wiring,
# names ignored) of the same MXNet definitions, by the same route, with MXNet 1.9.1. The
# classic GoogLeNet and Inception-BN have no float16 variant to compare with.
REFERENCE_FINGERPRINTS = {
    ("alexnet", "float32"): "5ec962ef4489a4610076afc60c7b5701abb5dd8ed9e6d5a3c30fd36d35e75d56",
    ("vgg-16", "float32"): "9f8259ec0cd668ee9fe823d4373c15af6ac63303bb7e491bb070c77bbe87c3a8",
    ("googlenet", "float32"): "de2d5856a341cd4c4010d52b4a40f534196f5f92d9ae501c7984fc0384f5a815",
    ("inception-bn", "float32"): "2ec2c8ac800a3799e00ea3e0232311ce65cc33d0dcad3b24d8470b8da95c16a9",
    ("inception-v3", "float32"): "11f847847f8f80113c045a05be7f4dedbc5ce63a9308abdc2f104558971e46d3",
    ("resnet-50", "float32"): "95394f0f25de6dc60e070e83075f8470b0c50202aacd0fe457a9dcf1ae3058b6",
    ("resnet-152", "float32"): "c502f1fd94bebfc78f63dfb75d779b51db5e7522fc6350dd5cd7c89ed3b9e70c",
    ("alexnet", "float16"): "19bd28ee47656b7fd4e67fb08bc06afa20902791fe0f20325c731a65f1255d35",
    ("vgg-16", "float16"): "d37e097df0052c9173f50c6420a335638d0969d8fa62d2b6889c646acad78aa0",
    ("inception-v3", "float16"): "384c7bb1a7465fdfefa874bf3d38c8989d0e12e35fee125e709ccbcfeda9b581",
    ("resnet-50", "float16"): "c4718e266c9fcbf697b934cb65651ba51383fcdbed7badd855ab23697727e762",
    ("resnet-152", "float16"): "34b8e61c4c6e3048a908e44f189d0459804d81327ea9f191f3efc2824bf21dbb",
}

_REPORT_SCRIPT = """
import json, sys
import mxnet as mx
from bench_tasks import networks
from bench_tasks.constants import NETWORKS
from tests.support.network_fingerprint import fingerprint

BATCH = 2
report = {}
for name in NETWORKS:
    shape = networks.image_shape(name)
    symbol = networks.get_symbol(name)
    _, (output_shape,), _ = symbol.infer_shape(data=(BATCH, *shape))
    half = networks.get_symbol(name, dtype="float16")
    _, (half_output_shape,), _ = half.infer_shape(data=(BATCH, *shape))
    arg_types, (half_output_type,), _ = half.infer_type(data="float32")
    ten_classes = networks.get_symbol(name, num_classes=10)
    _, (ten_output_shape,), _ = ten_classes.infer_shape(data=(BATCH, *shape))
    report[name] = {
        "arguments": symbol.list_arguments(),
        "outputs": symbol.list_outputs(),
        "output_shape": list(output_shape),
        "parameter_count": networks.parameter_count(name),
        "parameter_count_10_classes": networks.parameter_count(name, num_classes=10),
        "fc_inputs": [s[1] for a, s in zip(symbol.list_arguments(), symbol.infer_shape(data=(1, *shape))[0])
                      if a.endswith("_weight")][-1],
        "describe": networks.describe(name),
        "float16_output_shape": list(half_output_shape),
        "float16_output_type": half_output_type.__name__,
        "float16_arg_types": {a: t.__name__ for a, t in zip(half.list_arguments(), arg_types)},
        "float16_ops": [node["op"] for node in json.loads(half.tojson())["nodes"]],
        "ten_classes_output_shape": list(ten_output_shape),
        "fingerprints": {"float32": fingerprint(symbol.tojson()), "float16": fingerprint(half.tojson())},
    }
json.dump(report, sys.stdout)
"""


@pytest.fixture(scope="module")
def report() -> dict:
    """What the worker interpreter reports about every network (one subprocess for the module)."""
    completed = run_bench_python(_REPORT_SCRIPT, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_every_network_has_a_definition() -> None:
    assert set(REFERENCE_PARAMETERS) == set(NETWORKS)
    for name in NETWORKS:
        assert networks.image_shape(name) in {(3, 224, 224), (3, 299, 299)}


def test_image_shapes() -> None:
    assert networks.image_shape("inception-v3") == (3, 299, 299)
    assert networks.image_shape_text("inception-v3") == "3,299,299"
    for name in set(NETWORKS) - {"inception-v3"}:
        assert networks.image_shape(name) == (3, 224, 224)


@pytest.mark.parametrize("name", NETWORKS)
def test_symbol_contract_and_output_shape(report: dict, name: str) -> None:
    network = report[name]
    assert network["arguments"][0] == "data"
    assert network["arguments"][-1] == "softmax_label"
    assert network["outputs"] == ["softmax_output"]
    assert network["output_shape"] == [2, 1000]
    assert network["ten_classes_output_shape"] == [2, 10]


@pytest.mark.parametrize("name", NETWORKS)
def test_parameter_count_equals_mxnet_classic_definition(report: dict, name: str) -> None:
    network = report[name]
    assert network["parameter_count"] == REFERENCE_PARAMETERS[name]
    assert len(network["arguments"]) - 2 == REFERENCE_ARGUMENTS[name]
    # num_classes only changes the classifier: (1000 - 10) × (its inputs + 1 bias) fewer.
    dropped = (1000 - 10) * (network["fc_inputs"] + 1)
    assert network["parameter_count_10_classes"] == REFERENCE_PARAMETERS[name] - dropped


@pytest.mark.parametrize(("name", "dtype"), sorted(REFERENCE_FINGERPRINTS))
def test_graph_equals_mxnet_classic_definition(report: dict, name: str, dtype: str) -> None:
    """Same operators, attributes and wiring as MXNet's definition: the same network, not only as big."""
    assert report[name]["fingerprints"][dtype] == REFERENCE_FINGERPRINTS[(name, dtype)]


@pytest.mark.parametrize("name", NETWORKS)
def test_describe(report: dict, name: str) -> None:
    described = report[name]["describe"]
    channels, height, width = networks.image_shape(name)
    assert described["network"] == name
    assert described["image_shape"] == f"{channels},{height},{width}"
    assert described["parameters"] == REFERENCE_PARAMETERS[name]
    assert described["arguments"] == REFERENCE_ARGUMENTS[name]
    assert described["num_classes"] == 1000
    assert described["output_shape"] == [1, 1000]
    assert described["inputs"] == ["data", "softmax_label"]
    assert described["reference"].startswith("apache/mxnet example/image-classification/symbols/")
    # Networks with batch norm have moving mean and variance (aux states, not parameters).
    has_batch_norm = any(arg.endswith("_gamma") for arg in report[name]["arguments"])
    assert (described["aux_states"] > 0) == has_batch_norm
    json.dumps(described)  # JSON-ready as it is


@pytest.mark.parametrize("name", NETWORKS)
def test_float16_computes_in_half_precision_between_two_casts(report: dict, name: str) -> None:
    network = report[name]
    types = network["float16_arg_types"]
    assert types.pop("data") == "float32"
    assert types.pop("softmax_label") == "float32"
    weights = {arg: kind for arg, kind in types.items() if arg.endswith(("_weight", "_bias"))}
    assert weights and set(weights.values()) == {"float16"}
    # MXNet keeps BatchNorm's gamma and beta in float32 for float16 data.
    assert {kind for arg, kind in types.items() if arg.endswith(("_gamma", "_beta"))} <= {"float32"}
    assert network["float16_output_type"] == "float32"
    assert network["float16_output_shape"] == [2, 1000]
    ops = [op for op in network["float16_ops"] if op != "null"]
    assert ops[0] == "Cast" and ops[-2] == "Cast" and ops[-1] == "SoftmaxOutput"
    assert network["parameter_count"] == REFERENCE_PARAMETERS[name]


def test_unknown_network_names_the_allowed_values() -> None:
    for call in (networks.image_shape, networks.get_symbol, networks.parameter_count, networks.describe):
        with pytest.raises(ValueError, match="network must be one of") as raised:
            call("resnet-51")
        message = str(raised.value)
        assert "resnet-51" in message
        assert all(name in message for name in NETWORKS)


def test_bad_dtype_and_num_classes_are_refused_before_building() -> None:
    with pytest.raises(ValueError, match="dtype must be one of") as raised:
        networks.get_symbol("alexnet", dtype="float64")
    assert all(dtype in str(raised.value) for dtype in DTYPES)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_classes must be a positive integer"):
            networks.get_symbol("alexnet", num_classes=bad)


_IMPORT_CHECK = "import sys, bench_tasks, bench_tasks.networks; print('mxnet' in sys.modules)"


def test_importing_the_package_does_not_import_mxnet_in_the_orchestrator_env() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHECK], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == "False"


def test_importing_the_package_does_not_import_mxnet_even_where_installed() -> None:
    completed = run_bench_python(_IMPORT_CHECK + "; import mxnet; print('mxnet' in sys.modules)", check=True)
    assert completed.stdout.split() == ["False", "True"]
