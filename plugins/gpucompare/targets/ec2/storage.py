"""Where an ``ec2`` target's run lives in S3, and the worker bundle it uploads there.

Keys: the region marker the sweeper reads (``<prefix>/<deployment>/regions/<region>``), the
run's prefix (``<prefix>/<deployment>/<run key>``), below it the instance's own writer
prefix (its ``aws:userid``, the only one its instance profile may write) with the results,
progress and SSM output, and the content-addressed bundles
(``<prefix>/<deployment>/bundles/<sha256>.tar.gz``). ``upload_bundle`` puts the worker code
there unless exactly its bytes are already present; ``collect`` downloads the run's results and
``delete_run_objects`` removes the run's keys after the ingest. ``RunStorage`` needs the target's
clients and options; ``Ec2Target`` coordinates it with the other parts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpucompare.config import patterns
from gpucompare.targets import runs
from gpucompare.targets.base import TargetError, TargetSpec, TargetState
from gpucompare.targets.ec2.aws_errors import CONDITIONAL_WRITE_LOST_CODES, client_error_code
from gpucompare.targets.ec2.options import Ec2Options

log = logging.getLogger(__name__)

#: Below a writer's prefix: the records so far of each sweep it ran (``RunStorage.partial_key``).
PARTIAL_FOLDER = "partial"


class RunStorage:
    """The run's S3 keys and the bundle upload (see the module docstring): one part of
    ``Ec2Target``, usable alone with a spec, its options, the clients (``AwsClients``) and how
    to read a state's instance id (``instance_id``: raises when the state has none)."""

    def __init__(self, spec: TargetSpec, options: Ec2Options, clients: Any,
                 instance_id: Callable[[TargetState], str]) -> None:
        self.spec, self.options, self.clients = spec, options, clients
        self._instance_id = instance_id

    @property
    def s3_hook(self) -> Any:
        return self.clients.s3_hook

    @property
    def iam_client(self) -> Any:
        return self.clients.iam_client

    def writer_of(self, instance_id: str) -> str:
        """The instance's ``aws:userid`` (``<role id>:<instance id>``): the one S3 prefix of the
        run its instance profile may write (``docker/iam/instance-profile-policy.json``)."""
        try:
            profile = self.iam_client.get_instance_profile(InstanceProfileName=self.options.instance_profile)
            role_id = profile["InstanceProfile"]["Roles"][0]["RoleId"]
        except Exception as exc:
            raise TargetError(f"IAM GetInstanceProfile {self.options.instance_profile!r}: {exc}") from exc
        return f"{role_id}:{instance_id}"

    def region_marker_key(self) -> str:
        return f"{self.options.results_prefix}/{self.options.deployment}/regions/{self.spec.region}"

    def record_region(self) -> None:
        """Leave ``<prefix>/<deployment>/regions/<region>`` before launching: the sweeper reads
        these, so an instance in a region no fleet entry names is still swept."""
        try:
            self.s3_hook.conn.put_object(Bucket=self.options.results_bucket, Key=self.region_marker_key(),
                                         Body=b"")
        except Exception as exc:
            raise TargetError(f"could not record region {self.spec.region} at s3://"
                              f"{self.options.results_bucket}/{self.region_marker_key()} before launching: "
                              f"{exc}") from exc

    def launch_plan(self, run_id: str, dead: tuple[str, ...],
                    fresh: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """What the run's launch sends besides the options (image id, ttl, expires-at): the first
        try's, kept at ``<run prefix>/launch-<hash of dead>.json`` (a conditional PUT: two tries at
        once agree on one), so every try with the same idempotency token sends the same request
        (a recomputed expires-at made AWS refuse a retry with IdempotentParameterMismatch).
        ``fresh()`` makes a new plan: the first time, and when the kept one has used up half its
        time-to-live without an instance (its ``generation`` then grows, and with it the token)."""
        import json
        from datetime import UTC, datetime

        from botocore.exceptions import ClientError

        bucket = self.options.results_bucket
        dead_hash = hashlib.sha256(" ".join(sorted(dead)).encode()).hexdigest()[:16]
        key = f"{self.run_prefix(run_id)}/launch-{dead_hash}.json"
        kept = self._read_json(bucket, key)
        now = datetime.now(UTC).timestamp()
        if kept is not None and _plan_time_left(kept, now) >= kept["ttl_minutes"] * 30:
            return kept
        plan = {**fresh(), "generation": 0 if kept is None else int(kept.get("generation", 0)) + 1}
        try:
            extra = {"IfNoneMatch": "*"} if kept is None else {}
            self.s3_hook.conn.put_object(Bucket=bucket, Key=key, Body=json.dumps(plan).encode(), **extra)
        except ClientError as exc:
            if client_error_code(exc) not in CONDITIONAL_WRITE_LOST_CODES:
                raise TargetError(f"could not keep the launch plan at s3://{bucket}/{key}: {exc}") from exc
            return self._read_json(bucket, key) or plan  # another try wrote it first: use theirs
        return plan

    def _read_json(self, bucket: str, key: str) -> dict[str, Any] | None:
        """The JSON object at ``key`` (None when absent); TargetError when it cannot be read."""
        import json

        body = self._read_bytes(key)
        return None if body is None else json.loads(body)

    def run_prefix(self, run_id: str) -> str:
        """Everything of one run lives below this key prefix (the deployment's own prefix first)."""
        return f"{self.options.results_prefix}/{self.options.deployment}/{runs.run_key(run_id)}"

    def writer_prefix(self, state: TargetState) -> str:
        """The run's keys the instance may write: below its own ``aws:userid``."""
        writer = state.extra.get("writer")
        if not isinstance(writer, str) or not patterns.INSTANCE_WRITER.fullmatch(writer):
            writer = self.writer_of(self._instance_id(state))
            state.extra["writer"] = writer
        return f"{self.run_prefix(state.run_id)}/{writer}"

    def results_key(self, state: TargetState) -> str:
        return f"{self.writer_prefix(state)}/results.jsonl"

    def bundle_key(self, sha256: str) -> str:
        return f"{self.options.results_prefix}/{self.options.deployment}/bundles/{sha256}.tar.gz"

    def upload_bundle(self, bundle: UploadableBundle) -> str:
        """Put the bundle at its content-addressed key unless an object with exactly its bytes
        is there already; an object with other bytes (poisoned, truncated) is replaced."""
        from botocore.exceptions import ClientError

        key, bucket = self.bundle_key(bundle.sha256), self.options.results_bucket
        try:
            present = self.s3_hook.conn.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if client_error_code(exc) not in ("NoSuchKey", "404"):
                raise TargetError(f"could not read s3://{bucket}/{key}: {exc}") from exc
            present = None
        if present is not None and hashlib.sha256(present).hexdigest() == bundle.sha256:
            return key
        if present is not None:
            log.warning("s3://%s/%s does not hold the bytes its name promises (sha256 %s): "
                        "uploading it again", bucket, key, hashlib.sha256(present).hexdigest())
        self.s3_hook.load_bytes(bundle.data, key, bucket, replace=True)
        return key

    def progress_key(self, state: TargetState, config: dict[str, Any]) -> str:
        return f"{self.writer_prefix(state)}/progress/{runs.sweep_dir_name(config)}.log"

    def partial_key(self, state: TargetState, config: dict[str, Any]) -> str:
        """Where the running sweep's records so far go (``commands.sweep_commands``: copied as they
        grow), beside its progress object."""
        return f"{self.writer_prefix(state)}/{PARTIAL_FOLDER}/{runs.sweep_dir_name(config)}.jsonl"

    def lost_records(self, state: TargetState) -> list[dict[str, Any]]:
        """The ``ok`` records the run's lost instances uploaded (``state.extra["reclaims"]``, oldest
        first), each configuration once (``targets.resume.kept_records``): the night's share of
        the machines a reclaim took. Per lost writer: its ``results.jsonl`` (the sweeps it
        finished), then its ``partial/`` objects (the sweep it was running when it was lost: the
        records so far, whose last line may be cut mid-write: only lines that parse count)."""
        from gpucompare.targets import resume

        kept: dict[str, dict[str, Any]] = {}
        for reclaim in state.extra.get("reclaims", []):
            writer = reclaim.get("writer")
            if not isinstance(writer, str) or not patterns.INSTANCE_WRITER.fullmatch(writer):
                continue  # lost before its writer was known: it uploaded nothing
            prefix = f"{self.run_prefix(state.run_id)}/{writer}"
            partials = self.s3_hook.list_keys(bucket_name=self.options.results_bucket,
                                              prefix=f"{prefix}/{PARTIAL_FOLDER}/") or []
            for key in [f"{prefix}/results.jsonl", *sorted(partials)]:
                for record in resume.kept_records(parsed_records(self._read_bytes(key) or b"", where=key)):
                    kept.setdefault(str(record["config_id"]), dict(record))
        return list(kept.values())

    def _read_bytes(self, key: str) -> bytes | None:
        """The object at ``key`` of the results bucket (None when absent)."""
        from botocore.exceptions import ClientError

        bucket = self.options.results_bucket
        try:
            return self.s3_hook.conn.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if client_error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise TargetError(f"could not read s3://{bucket}/{key}: {exc}") from exc

    def collect(self, state: TargetState, local_path: str) -> str:
        """The run's records at ``local_path`` (written beside it, then renamed: a reader never
        sees half a file): the instance's ``results.jsonl``, after a reclaim with the lost
        instances' ``ok`` records first (``lost_records``; a configuration the replacement measured
        too is kept once, the lost instance's). A ``TargetError`` when no sweep uploaded any."""
        import json

        key, bucket = self.results_key(state), self.options.results_bucket
        body = self._read_bytes(key)
        lost = self.lost_records(state) if state.extra.get("reclaims") else []
        if body is None and not lost:
            raise TargetError(f"no results at s3://{bucket}/{key}: the sweep did not upload them "
                              f"(did run_sweep succeed on {state.resource_id}?)")
        kept = {str(record["config_id"]) for record in lost}
        lines = [json.dumps(record, sort_keys=True) + "\n" for record in lost]
        for line in (body or b"").decode().splitlines(keepends=True):
            if line.strip() and (not kept or str(json.loads(line).get("config_id")) not in kept):
                lines.append(line if line.endswith("\n") else line + "\n")
        directory = os.path.dirname(os.path.abspath(local_path))
        os.makedirs(directory, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".results-", suffix=".partial", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.writelines(lines)
            os.replace(partial, local_path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        log.info("Collected s3://%s/%s (%d record(s) of lost instances) to %s", bucket, key, len(lost),
                 local_path)
        return local_path

    def delete_run_objects(self, run_id: str) -> int:
        """Delete every object of the run (results, progress, SSM output) once its results are
        in the lake; returns how many. The bucket's lifecycle rule catches what this misses."""
        bucket, prefix = self.options.results_bucket, self.run_prefix(run_id) + "/"
        keys = self.s3_hook.list_keys(bucket_name=bucket, prefix=prefix) or []
        if keys:
            self.s3_hook.delete_objects(bucket, keys)
        log.info("Deleted %d object(s) of run %s under s3://%s/%s", len(keys), run_id, bucket, prefix)
        return len(keys)


def parsed_records(body: bytes, *, where: str) -> list[dict[str, Any]]:
    """The records of a JSON Lines object that a worker may still have been writing: each line
    that parses as a JSON object with a ``config_id``; any other (the last one cut mid-write by
    the copy or the reclaim) is left out, with a warning."""
    import json

    records = []
    for number, line in enumerate(body.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and "config_id" in record:
            records.append(record)
        else:
            log.warning("%s line %d is not a whole record (cut mid-write?): left out", where, number)
    return records


@dataclass(frozen=True)
class UploadableBundle:
    """The worker bundle as bytes, with the hashes that name it here and check it there."""

    data: bytes
    content_hash: str  # the shared helper's name of this code version
    sha256: str  # of the tarball's bytes: checked on the instance after download
    requirements_hash: str  # of requirements-gpu.txt: names the worker venv


def build_worker_bundle() -> UploadableBundle:
    """The worker code (``bench_tasks/``) from the targets' shared bundle helper."""
    from gpucompare.targets import bundle as _worker_bundle

    bundle = _worker_bundle.build_bundle()
    data = bundle.tarball.read_bytes()
    return UploadableBundle(data=data, content_hash=bundle.content_hash,
                            sha256=hashlib.sha256(data).hexdigest(),
                            requirements_hash=bundle.requirements_hashes.get("gpu", bundle.content_hash))


def _plan_time_left(plan: dict[str, Any], now: float) -> float:
    """Seconds until a launch plan's expires-at (negative when passed; -inf when unreadable)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(plan["expires_at"]).replace("Z", "+00:00")).timestamp() - now
    except (KeyError, ValueError):
        return float("-inf")
