"""``gpucompare schema|iam-policy``: what the fleet file may hold and what its targets need from
AWS (a thin layer over :mod:`gpucompare.config.models` and :mod:`gpucompare.targets.ec2.iam`)."""

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
    import re

    from gpucompare import settings
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
        if args.account != "ACCOUNT_ID" and not re.fullmatch(r"[0-9]{12}", args.account):
            raise UsageError(f"--account: {args.account!r} is not a 12-digit AWS account id")
        if args.deployment != "DEPLOYMENT" and not re.fullmatch(settings.DEPLOYMENT_PATTERN, args.deployment):
            raise UsageError(f"--deployment: {args.deployment!r} is not a deployment name "
                             f"({settings.DEPLOYMENT_PATTERN})")
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


COMMANDS: tuple[Command, ...] = (
    Command("schema", "print the JSON schema of the fleet file, the trigger params or the trigger form",
            _configure_schema, _run_schema),
    Command("iam-policy", "print the orchestrator's IAM policy for the fleet file's ec2 targets",
            _configure_iam_policy, _run_iam_policy),
)
