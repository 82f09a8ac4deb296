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
# re-exported: the device rule the worker checks its configurations and records with
from bench_tasks.constants import (  # noqa: F401
    DEVICE_PATTERN,
    RUN_ID_ALLOWED,
    RUN_ID_CHARS,
    RUN_ID_MAX,
    RUN_ID_PATTERN,
)

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
#: a 12-digit AWS account id
AWS_ACCOUNT = re.compile(r"[0-9]{12}")
#: an Athena (Glue) database name, written into the DDL as it is
GLUE_DATABASE = re.compile(r"[a-z_][a-z0-9_]{0,63}")
#: an ``s3://bucket/prefix`` location, written into the DDL as it is
S3_LOCATION = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,62}(/[A-Za-z0-9._=-]+)*/?")
#: an Airflow connection id
CONN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}")
#: one device (``gpu:1``): the worker's rule (bench_tasks/constants.py, which cannot import this)
DEVICE = re.compile(DEVICE_PATTERN)
#: ``gpu:0,gpu:1`` / ``cpu``: a bare kind, or devices comma-separated
DEVICES = re.compile(rf"((cpu|gpu)|{DEVICE_PATTERN})(,{DEVICE_PATTERN})*")
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
#: a run of characters a file name made from a run id may not hold (each run becomes one ``_``)
NOT_PLAIN_RUN = re.compile(r"[^A-Za-z0-9._-]+")
#: a character a run id may not hold (a derived run id replaces it)
NOT_RUN_ID_CHAR = re.compile(f"[^{RUN_ID_CHARS}]")
#: a character a fleet name may not hold (a name derived from other values replaces it)
NOT_NAME_CHAR = re.compile(r"[^a-z0-9_-]")
#: a Delta partition value: it goes into a folder name unescaped
PARTITION_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
#: a host a scaling run reaches: a DNS name, an IPv4 or an IPv6 address
HOST_ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")
#: the marker of a scaling run's processes (``GPUCOMPARE_DIST=<tag>``): no regex or shell specials
MARKER_TAG = re.compile(r"[a-z0-9/-]+")
#: a SkyPilot catalog's accelerator name (``A100-80GB``, ``H100 (SXM)``)
ACCELERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,63}")
#: a fragment a SQL file names, ``{{machine_key}}`` or with a table alias ``{{machine_key p.}}``
SQL_FRAGMENT = re.compile(r"\{\{([a-z_]+)(?: ([a-z_]+)\.)?\}\}")
#: this deployment's name in tags, run ids and S3 keys (the ``deployment`` setting)
DEPLOYMENT = re.compile(r"[a-z0-9][a-z0-9-]{0,19}")
#: a deployment's identity in its name lease (a UUID as created; ``targets.name_lease``)
DEPLOYMENT_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,63}")
#: A CUDA compute capability, major.minor (gpus.csv, runtimes.csv); read with :func:`capability`
COMPUTE_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]")
#: the content hash of a worker bundle
CODE_HASH = re.compile(r"[0-9a-f]{8,64}")
AMI_ID = re.compile(r"ami-[0-9a-f]{8,17}")
#: an EC2 instance id
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
#: ``aws:userid`` of an instance role session: ``<role id>:<instance id>``
INSTANCE_WRITER = re.compile(rf"[A-Z0-9]{{8,128}}:{INSTANCE_ID.pattern}")
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
#: the interpreter by name or by absolute path
INTERPRETER = re.compile(f"{BASE_PYTHON.pattern}|{ABSOLUTE_PATH.pattern}")
#: a docker repository: lower case (docker refuses upper case), a registry host, its port
#: and path (``nvcr.io/nvidia/mxnet``, ``localhost:5000/worker``)
_DOCKER_REPOSITORY = r"[a-z0-9][a-z0-9._/:-]{0,200}"
_DOCKER_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
#: an image's content digest (``sha256:<64 hex>``)
IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: a docker image reference ``name[:tag][@sha256:digest]`` (what a fleet may name)
DOCKER_IMAGE = re.compile(rf"{_DOCKER_REPOSITORY}(:{_DOCKER_TAG})?(@{IMAGE_DIGEST.pattern})?")
#: ``name:tag``, how data/runtimes.csv names an image (the repository then holds no ':')
DOCKER_IMAGE_TAGGED = re.compile(rf"[a-z0-9][a-z0-9._/-]{{0,200}}:{_DOCKER_TAG}")
#: ``name@sha256:<64 hex>``: an image pinned to its content, what a pull reports and a run uses
DOCKER_IMAGE_PINNED = re.compile(rf"{_DOCKER_REPOSITORY}@{IMAGE_DIGEST.pattern}")
#: a worker runtime's name (data/runtimes.csv: ``pip-cu112``, ``ngc-24.06``)
RUNTIME_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,39}")
#: a docker container name (docker's own rule, bounded): what ``targets.container`` names a sweep's
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,199}")
CONTAINER_NAME_ALLOWED = "a letter or digit, then up to 199 letters, digits, '_', '.' or '-'"
#: ``docker run --gpus`` values: all, a count or device=0,1
DOCKER_GPUS = re.compile(r"all|[1-9][0-9]?|device=[0-9]{1,2}(,[0-9]{1,2})*")
#: an SSM parameter holding an AMI id (``/aws/service/…``), optionally ``resolve:ssm:``
SSM_PARAMETER = re.compile(r"(resolve:ssm:)?(/[A-Za-z0-9_.\-]+)+")
#: what a fleet may say for an AMI: an id or an SSM parameter holding one
AMI_REF = re.compile(f"{AMI_ID.pattern}|{SSM_PARAMETER.pattern}")
SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
#: an availability zone name: its region and a letter (``us-east-1a``)
AVAILABILITY_ZONE = re.compile(f"(?:{AWS_REGION.pattern})[a-z]")
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


def capability(text: str) -> tuple[int, int]:
    """A compute capability as numbers, for comparisons: ``"8.6"`` → ``(8, 6)``; ``ValueError``
    naming the rule for any other text."""
    if not COMPUTE_CAPABILITY.fullmatch(text):
        raise ValueError(f"{text!r} is not a compute capability major.minor ({anchored(COMPUTE_CAPABILITY)})")
    major, minor = text.split(".")
    return int(major), int(minor)


def anchored(*alternatives: re.Pattern[str]) -> str:
    """The pattern(s) as one anchored regular expression, as error messages show it."""
    return "^(?:" + "|".join(p.pattern for p in alternatives) + ")$"


def schema_pattern(pattern: re.Pattern[str]) -> str:
    """The pattern for a JSON schema's ``pattern``, which *searches*: anchored (without anchors
    ``aws; rm -rf`` would pass), and ``(?!\n)`` after ``$`` because Python's ``jsonschema``
    (Airflow's form check) lets ``$`` match before a trailing newline (ECMA-262 does not; the
    lookahead means the same in both)."""
    return anchored(pattern) + r"(?!\n)"
