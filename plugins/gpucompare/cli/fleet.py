"""``gpucompare schema|iam-policy|release-name``: what the fleet file may hold, what its targets need
from AWS, and giving up a deployment name (a thin layer over :mod:`gpucompare.config.models`,
:mod:`gpucompare.targets.ec2.iam` and :mod:`gpucompare.targets.name_lease`)."""

from __future__ import annotations

import argparse

from gpucompare.cli.common import Command
from gpucompare.config import patterns
from gpucompare.errors import UsageError

# ---- schema ------------------------------------------------------------------------------
#: what ``schema`` prints: the JSON schema of a model of gpucompare.config.models
SCHEMAS = ("fleet", "trigger", "form")


def _configure_schema(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=SCHEMAS, help="fleet: the fleet file; trigger: the manual DAG's "
                        "params; form: the trigger form's Params as the DAG declares them")


def _run_schema(args: argparse.Namespace) -> int:
    import json

    from gpucompare.config import models

    if args.what == "fleet":
        document = models.FleetFile.model_json_schema()
    elif args.what == "trigger":
        document = models.TriggerParams.model_json_schema()
    else:
        document = models.form_fields()
    print(json.dumps(document, indent=2, sort_keys=True))
    return 0


# ---- iam-policy ----------------------------------------------------------------------------
def _configure_iam_policy(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Print the orchestrator role's IAM policy for the fleet file: RunInstances only "
                          "for its ec2 instance types, its instance profiles and the runtimes' AMI owners "
                          "(gpucompare.targets.ec2.iam). Placeholders stay where no value is given.")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or the shipped example)")
    parser.add_argument("--instance-type", action="append", default=[], dest="instance_types",
                        help="an EC2 type to allow beyond the fleet's (repeatable; manual runs)")
    parser.add_argument("--account", default="ACCOUNT_ID", help="the AWS account id (12 digits)")
    parser.add_argument("--deployment", default="DEPLOYMENT",
                        help="this deployment's name (GPUCOMPARE_DEPLOYMENT)")
    parser.add_argument("--bucket", default="RESULTS_BUCKET", help="the results bucket")
    parser.add_argument("--tag-guard", action="store_true",
                        help="print instead the service control policy that denies everyone the gpucompare "
                             "tags after launch")


def _run_iam_policy(args: argparse.Namespace) -> int:
    import json

    from gpucompare.config import fleet, validation
    from gpucompare.targets.ec2 import iam

    if args.tag_guard:
        print(json.dumps(iam.tag_guard_policy(), indent=2))
        return 0
    try:
        loaded = fleet.load_fleet(args.fleet)
        specs = [t.spec for t in loaded.targets]
        for value in args.instance_types:
            if not patterns.EC2_INSTANCE_TYPE.fullmatch(value):
                raise UsageError(f"--instance-type: {value!r} is not an EC2 type such as g5.xlarge")
        if args.account != "ACCOUNT_ID" and not patterns.AWS_ACCOUNT.fullmatch(args.account):
            raise UsageError(f"--account: {args.account!r} is not a 12-digit AWS account id")
        if args.deployment != "DEPLOYMENT" and not patterns.DEPLOYMENT.fullmatch(args.deployment):
            raise UsageError(f"--deployment: {args.deployment!r} is not a deployment name "
                             f"({patterns.anchored(patterns.DEPLOYMENT)})")
        if args.bucket != "RESULTS_BUCKET" and not patterns.BUCKET.fullmatch(args.bucket):
            raise UsageError(f"--bucket: {args.bucket!r} is not an S3 bucket name")
        prefix = (loaded.defaults.get("ec2") or {}).get("results_prefix") or "gpucompare"
        policy = iam.orchestrator_policy([*iam.fleet_instance_types(specs), *args.instance_types],
                                         instance_profiles=iam.fleet_instance_profiles(specs),
                                         account=args.account, deployment=args.deployment,
                                         bucket=args.bucket, prefix=prefix)
    except (ValueError, validation.ValidationError) as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(policy, indent=2))
    return 0


# ---- release-name --------------------------------------------------------------------------
def _configure_release_name(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Release a deployment name held in a results bucket "
                          "(gpucompare.targets.name_lease): the next deployment that starts under it "
                          "takes it. Prints what it released. Run it when the holder is gone or another "
                          "deployment takes its place; a holder still running refuses nothing until it "
                          "takes the name again.")
    parser.add_argument("--deployment", help="the name to release (default: this deployment's, "
                        "GPUCOMPARE_DEPLOYMENT)")
    parser.add_argument("--bucket", help="the results bucket (default: the fleet's "
                        "defaults.ec2.results_bucket)")
    parser.add_argument("--prefix", help="the results prefix (default: the fleet's, else gpucompare)")
    parser.add_argument("--aws-conn-id", help="the Airflow connection to reach S3 through (default: the "
                        "fleet's, else aws_default; where it does not exist, the environment's identity)")
    parser.add_argument("--holder", help="release only if this identity holds the name")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or the shipped example)")


def _release_location(args: argparse.Namespace) -> tuple[str, str, str, str]:
    """(deployment, connection, bucket, prefix): the flags, else the setting and the fleet's ec2 defaults."""
    from gpucompare import settings
    from gpucompare.config import fleet
    from gpucompare.config.models import PLACEHOLDER_BUCKET

    deployment = args.deployment or settings.deployment()
    if not patterns.DEPLOYMENT.fullmatch(deployment):
        raise UsageError(f"--deployment: {deployment!r} is not a deployment name "
                         f"({patterns.anchored(patterns.DEPLOYMENT)})")
    defaults = {} if args.bucket and args.prefix and args.aws_conn_id else \
        (fleet.load_fleet(args.fleet).defaults.get("ec2") or {})
    bucket = args.bucket or defaults.get("results_bucket")
    if not bucket or bucket == PLACEHOLDER_BUCKET or not patterns.BUCKET.fullmatch(bucket):
        raise UsageError(f"--bucket: {bucket!r} is not a results bucket: give --bucket "
                         "(the refusal names it)")
    prefix = args.prefix or defaults.get("results_prefix") or "gpucompare"
    if not patterns.PREFIX.fullmatch(prefix):
        raise UsageError(f"--prefix: {prefix!r} is not an S3 key prefix")
    return deployment, args.aws_conn_id or defaults.get("aws_conn_id") or "aws_default", bucket, prefix


def _run_release_name(args: argparse.Namespace) -> int:
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from gpucompare.config import validation
    from gpucompare.targets import name_lease

    try:
        deployment, conn_id, bucket, prefix = _release_location(args)
        if args.holder is not None:
            name_lease.check_identity(args.holder, "--holder")
        released = name_lease.release_name(S3Hook(aws_conn_id=conn_id).conn, bucket, prefix, deployment,
                                           holder=args.holder)
    except (name_lease.NameLeaseError, ValueError, validation.ValidationError) as exc:
        raise UsageError(str(exc)) from None
    where = f"s3://{bucket}/{name_lease.lease_key(prefix, deployment)}"
    if released is None:
        print(f"the deployment name {deployment!r} was not held ({where}): nothing released")
    else:
        print(f"released the deployment name {deployment!r} ({where}): held by identity "
              f"{released.identity} since {released.since}, last renewed {released.renewed_at}, "
              f"taken on host {released.taken_on}")
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("schema", "print the JSON schema of the fleet file, the trigger params or the trigger form",
            _configure_schema, _run_schema),
    Command("iam-policy", "print the orchestrator's IAM policy for the fleet file's ec2 targets",
            _configure_iam_policy, _run_iam_policy),
    Command("release-name", "release a deployment name held in a results bucket (the name lease)",
            _configure_release_name, _run_release_name),
)
