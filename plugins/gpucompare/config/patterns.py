"""One definition per value pattern: what a name, provider, instance type, region, AMI, S3
bucket or prefix, run id… may look like, wherever it is checked (the fleet file, the trigger
form, target options, ingest, the command line).

Every pattern is compiled without anchors and used with ``fullmatch`` only (``^…$`` with
``match`` would accept a trailing newline). None admits whitespace, quotes or shell
metacharacters, so a value that passes may be quoted into a command without surprises.

The closed value sets every layer checks against (markets, currencies) live here too. This
module imports nothing of the library but the worker's constants, so every layer may import
it, ``settings`` included (tests/unit/test_layout.py holds it to that).
"""

from __future__ import annotations

import re

# re-exported: the run-id rule's alphabet, length and wording
from bench_tasks.constants import RUN_ID_ALLOWED, RUN_ID_CHARS, RUN_ID_MAX, RUN_ID_PATTERN  # noqa: F401

#: profile, target and scaling-group names in the fleet file
NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
#: a provider (``aws``, ``leadergpu``, ``local``…): the fleet, the form and ingest alike; the
#: ingest rule (which the lake's rows were written under) accepts every name the lake holds
PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
#: an EC2 instance type (``g5.xlarge``, ``u-6tb1.metal``)
EC2_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
#: any provider's machine name (published rows hold e.g. ``DGX-1``)
INSTANCE_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: an AWS region (``us-east-1``, ``us-gov-west-1``, ``us-isob-east-1``)
AWS_REGION = re.compile(r"[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]{1,2}")
#: any provider's region label (``eu-nl``, and every AWS region)
REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
#: an Airflow connection id
CONN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}")
#: ``gpu:0,gpu:1`` / ``cpu``
DEVICES = re.compile(r"(cpu|gpu)(:[0-9]{1,2})?(,(cpu|gpu):[0-9]{1,2})*")
#: one device of a scaling point
DEVICE = re.compile(r"(cpu|gpu):[0-9]{1,2}")
#: a network interface for MXNet's parameter server (``DMLC_INTERFACE``)
INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")
CRON = re.compile(r"@(hourly|daily|weekly|monthly|yearly)|([0-9*/,-]+ ){4}[0-9A-Za-z*/,-]+")
#: a run id (Airflow's ``manual__2026-…+00:00`` and the fleet's): the worker's rule, defined once
#: in bench_tasks/constants.py (the worker cannot import gpucompare)
RUN_ID = re.compile(RUN_ID_PATTERN)
#: a run id usable as it is in a folder name (others get a hash, targets/runs.py)
PLAIN_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: a character a plain run id (and so a path component or a container name) may not hold
NOT_PLAIN = re.compile(r"[^A-Za-z0-9_.-]")
#: this deployment's name in tags, run ids and S3 keys (the ``deployment`` setting)
DEPLOYMENT = re.compile(r"[a-z0-9][a-z0-9-]{0,19}")
#: A CUDA compute capability, major.minor (gpus.csv, runtimes.csv)
COMPUTE_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]")
#: the content hash of a worker bundle
CODE_HASH = re.compile(r"[0-9a-f]{8,64}")
AMI_ID = re.compile(r"ami-[0-9a-f]{8,17}")
#: an S3 bucket name
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: an S3 key prefix (no leading '/')
PREFIX = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
#: an ISO currency code
CURRENCY = re.compile(r"[A-Za-z]{3}")
#: the currencies prices, exchange rates and reports are kept in
CURRENCIES: tuple[str, ...] = ("EUR", "USD")
#: where a sweep runs (``gpucompare.targets.make_target`` knows these kinds; the fleet's target union)
TARGET_KINDS: tuple[str, ...] = ("local", "ssh", "ec2")
#: how a machine is bought: the price row, the launch and the cost guard use the same names
MARKETS: tuple[str, ...] = ("on_demand", "spot")
#: the market of a target, price or result that names none
DEFAULT_MARKET = "on_demand"
#: an absolute POSIX path of plain characters (a remote directory or interpreter); a ``.`` or
#: ``..`` segment is refused with ``has_dot_segment``
ABSOLUTE_PATH = re.compile(r"(/[A-Za-z0-9._+@%=,-]+)+/?")
#: the interpreter that builds a worker venv on a rented host
BASE_PYTHON = re.compile(r"python3(\.[0-9]{1,2})?")
#: a docker image reference ``name[:tag][@sha256:digest]``
DOCKER_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}(@sha256:[0-9a-f]{64})?")
#: a docker container name (docker's own rule, bounded): what ``targets.container`` names a sweep's
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,199}")
CONTAINER_NAME_ALLOWED = "a letter or digit, then up to 199 letters, digits, '_', '.' or '-'"
#: ``docker run --gpus`` values: all, a count or device=0,1
DOCKER_GPUS = re.compile(r"all|[1-9][0-9]?|device=[0-9]{1,2}(,[0-9]{1,2})*")
#: an SSM parameter holding an AMI id (``/aws/service/…``), optionally ``resolve:ssm:``
SSM_PARAMETER = re.compile(r"(resolve:ssm:)?(/[A-Za-z0-9_.\-]+)+")
SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
SECURITY_GROUP_ID = re.compile(r"sg-[0-9a-f]{8,17}")
#: an IAM instance profile name
INSTANCE_PROFILE = re.compile(r"[A-Za-z0-9+=,.@_-]{1,128}")
#: an EC2 tag key a fleet may add (``aws:`` and ``gpucompare:`` keys are refused apart)
TAG_KEY = re.compile(r"[A-Za-z0-9 _.:/=+@-]{1,128}")
#: an EC2 tag value a fleet may add: the characters EC2 allows in every service (no ';',
#: newline, NUL, quotes)
TAG_VALUE = re.compile(r"[A-Za-z0-9 _.:/=+@-]{0,256}")


def has_dot_segment(path: str) -> bool:
    """Whether a path has a ``.`` or ``..`` segment (``/srv/../etc``): refused in every path."""
    return any(part in {".", ".."} for part in path.split("/"))


def anchored(*alternatives: re.Pattern[str]) -> str:
    """The pattern(s) as one anchored regular expression, as error messages show it."""
    return "^(?:" + "|".join(p.pattern for p in alternatives) + ")$"


def schema_pattern(pattern: re.Pattern[str]) -> str:
    """The pattern for a JSON schema's ``pattern``, which *searches*: anchored (without anchors
    ``aws; rm -rf`` would pass), and ``(?!\n)`` after ``$`` because Python's ``jsonschema``
    (Airflow's form check) lets ``$`` match before a trailing newline (ECMA-262 does not; the
    lookahead means the same in both)."""
    return anchored(pattern) + r"(?!\n)"
