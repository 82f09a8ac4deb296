"""Where a lake is stored: its URI (a local path, ``file://`` or ``s3://bucket/prefix``), the
filesystem and path behind it, the S3 endpoint and region, delta-rs's storage options and how
commits to S3 are made safe (``s3_commit_mode``), and whole-file writes and copies in and out of it
(``put_bytes``, ``put_file``, ``delete_file``).

For S3 the identity, region and endpoint come from one Airflow connection (setting
``lake_conn_id``, see ``lake.identity``), else from the process environment (``AWS_ENDPOINT_URL``
or ``AWS_ENDPOINT_URL_S3``, e.g. moto's server in tests or MinIO; ``AWS_REGION`` or
``AWS_DEFAULT_REGION``; the usual AWS credentials), never from the repository. Each call takes
the credentials as they are then, so assumed-role credentials refreshed meanwhile are used. The
Delta tables themselves are ``lake.tables``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from gpucompare.errors import PermanentError
from gpucompare.lake.identity import S3Access, env_endpoint, s3_access


class LakeError(PermanentError):
    """A lake URI or table that cannot be used; the message says which and why."""


#: Characters refused in a lake URI before anything is written: delta-rs decodes ``%XX`` in a
#: table path (``pct%41`` becomes ``pctA``: the first commit lands, every later read fails).
#: ``#``, spaces and non-ASCII letters work and are allowed.
UNSAFE_URI_CHARACTERS = "%"


def check_uri_characters(uri: str) -> None:
    """LakeError if ``uri`` holds a character delta-rs would misread (``UNSAFE_URI_CHARACTERS``)."""
    bad = sorted({c for c in uri if c in UNSAFE_URI_CHARACTERS or not c.isprintable()})
    if bad:
        raise LakeError(
            f"lake URI {uri!r} holds {', '.join(repr(c) for c in bad)}: delta-rs would read it as an "
            "escape (%41 as 'A') and lose the table; choose a folder name without it"
        )


def check_local_folder(path: str) -> None:
    """LakeError if a local lake or output folder (or a folder above it) is a regular file."""
    current = Path(path)
    for candidate in (current, *current.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise LakeError(
                    f"{candidate} is a file, not a folder: give --lake (or --out) a folder, "
                    "existing or new"
                )
            return


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path in it that a lake or staging URI names; LakeError if unusable."""
    if uri.startswith("s3://"):
        bucket_and_prefix = uri[len("s3://") :].strip("/")
        if not bucket_and_prefix:
            raise LakeError(f"lake URI {uri!r} names no bucket (expected s3://bucket/prefix)")
        access = s3_access()
        if not access.from_connection and not access.endpoint:  # AWS: pyarrow finds the bucket's region
            fs, path = pafs.FileSystem.from_uri(uri)
            return fs, path.rstrip("/")
        return _s3_filesystem(access), bucket_and_prefix
    if "://" in uri and not uri.startswith("file://"):
        raise LakeError(f"lake URI {uri!r}: scheme not supported (use a local path, file:// or s3://)")
    local = uri[len("file://") :] if uri.startswith("file://") else uri
    path = Path(local).expanduser().resolve()
    return pafs.LocalFileSystem(), path.as_posix()


def _s3_filesystem(access: S3Access) -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem for one identity (``lake.identity``)."""
    options: dict[str, object] = {"region": access.region}
    if access.from_connection:
        options.update(access_key=access.access_key, secret_key=access.secret_key,
                       session_token=access.session_token)
    if access.endpoint:
        scheme, _, host = access.endpoint.partition("://")
        if scheme not in ("http", "https") or not host:
            raise LakeError(f"S3 endpoint {access.endpoint!r} ({access.source}) must be http(s)://host[:port]")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    return pafs.S3FileSystem(**options)


def s3_commit_mode() -> str:
    """How commits to an S3 lake are made safe (setting ``lake_s3_commit``): ``conditional_put``
    (the commit file is PUT with ``If-None-Match: *``: S3 refuses the second writer of a version;
    AWS S3, MinIO, R2 and moto's server honour it) or ``unsafe`` (for a store without conditional
    writes: a single writer only). delta-rs 1.6 no longer offers the DynamoDB locking provider
    (it logs "no longer supports S3DynamoDBLogStores"), so there is no third way."""
    from gpucompare import settings

    return settings.lake_s3_commit()


def storage_options(uri: str) -> dict[str, str]:
    """delta-rs storage options for a lake URI (empty for a local folder)."""
    if not uri.startswith("s3://"):
        return {}
    access = s3_access()
    options = {"AWS_REGION": access.region}
    if access.from_connection:
        options.update(AWS_ACCESS_KEY_ID=access.access_key or "",
                       AWS_SECRET_ACCESS_KEY=access.secret_key or "")
        if access.session_token:
            options["AWS_SESSION_TOKEN"] = access.session_token
    endpoint = access.endpoint
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3_commit_mode() == "conditional_put":
        options["conditional_put"] = "etag"
    else:
        options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def put_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` in ``fs``, whole or not at all: on a local disk under a hidden
    temporary name of this writer's own, then renamed (a reader sees the old file or the new one,
    and two writers of one file never write into each other's); elsewhere (S3) with one PUT, which
    appears when complete."""
    if isinstance(fs, pafs.LocalFileSystem):
        parent, name = path.rsplit("/", 1)
        fs.create_dir(parent, recursive=True)
        temp = f"{parent}/.{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        with fs.open_output_stream(temp) as stream:
            stream.write(data)
        fs.move(temp, path)
    else:
        with fs.open_output_stream(path) as stream:
            stream.write(data)


def put_file(local_path: str | Path, uri: str) -> None:
    """Copy a local file to ``uri`` (a local path or ``s3://bucket/key``), whole or not at all."""
    fs, path = filesystem_for(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(Path(local_path).read_bytes())
        partial.replace(target)
        return
    with open(local_path, "rb") as source, fs.open_output_stream(path) as out:  # appears when complete
        while chunk := source.read(8 << 20):
            out.write(chunk)


def delete_file(uri: str) -> None:
    """Remove the file at ``uri`` (local path or ``s3://``); nothing if it is already gone."""
    fs, path = filesystem_for(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


# ---- what a failed storage call means, and what to do ----------------------------------------
_ADVICE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("nosuchbucket", "bucket does not exist"),
     "the bucket does not exist: create it (aws s3 mb s3://BUCKET) or correct --lake"),
    (("invalidaccesskeyid", "signaturedoesnotmatch", "expiredtoken", "token has expired",
      "accessdenied", "access denied", "forbidden", "403", "credential", "invalidtoken",
      "unable to load credentials", "no credentials", "/latest/api/token", "/latest/meta-data",
      "169.254.169.254"),
     "the AWS credentials are missing, expired or not allowed here: set AWS_ACCESS_KEY_ID / "
     "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), AWS_PROFILE, or an instance role with access "
     "to the bucket"),
    (("connection refused", "tcp connect error", "error trying to connect", "dns error",
      "failed to lookup address", "timed out", "connect error", "error sending request",
      "curlcode", "couldn't connect", "could not connect"),
     "the storage endpoint cannot be reached: check AWS_ENDPOINT_URL (if set), the network and "
     "the region"),
    (("no space left on device", "os error 28", "errno 28", "disk quota exceeded", "os error 122",
      "errno 122"),
     "the disk holding it is full (or over quota): free space there or give --lake another place"),
    (("internalerror", "internal server error", "serviceunavailable", "service unavailable", "slowdown",
      "status code: 500", "status code: 502", "status code: 503", "server error (5",
      "http status server error", "internal_error"),
     "the storage service answered with a server error (HTTP 5xx) even after retries: try again later"),
)
#: What a failed write adds to the advices of a full disk and a server error (a read says nothing
#: of commits: it makes none).
_NOTHING_COMMITTED = {
    _ADVICE[3][1]: "nothing was committed (the lake is as it was, a later vacuum removes any stray file)",
    _ADVICE[4][1]: "nothing was committed (the lake is as it was)",
}


#: Environment variables that give AWS credentials (or where to find them); with none of them
#: set, a failed S3 call is most likely the client asking the instance metadata service.
_CREDENTIAL_SOURCES = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")


def explain_storage_error(exc: BaseException, uri: str, *, writes: bool = True) -> LakeError | None:
    """A LakeError saying what to do about a failed storage call on the lake at ``uri`` (a
    missing bucket, missing or expired credentials, an unreachable endpoint, a full disk, a server
    error, a file where a folder should be), or None when ``exc`` is none of these (a bug: let it
    show). ``writes``: the call was part of a write, so the message says nothing was committed."""
    if isinstance(exc, LakeError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if isinstance(exc, NotADirectoryError) or "not a directory" in lowered:
        return LakeError(f"{uri}: a file stands where a folder should be ({_first_line(text)}): give "
                         "--lake a folder")
    if not isinstance(exc, OSError) and "DeltaError" not in type(exc).__name__ and "Generic" not in text:
        return None
    advices = _ADVICE
    if uri.startswith("s3://") and not any(os.environ.get(name) for name in _CREDENTIAL_SOURCES):
        # no credentials given: the client asked the instance metadata service, which failed
        advices = ((_ADVICE[1][0] + _ADVICE[2][0], _ADVICE[1][1]), *_ADVICE)
    for needles, advice in advices:
        if any(needle in lowered for needle in needles):
            endpoint = env_endpoint()
            where = f" (endpoint {endpoint})" if endpoint and uri.startswith("s3://") else ""
            if writes and advice in _NOTHING_COMMITTED:
                advice = f"{advice}; {_NOTHING_COMMITTED[advice]}"
            return LakeError(f"{uri}{where}: {advice}. The store said: {_first_line(text)}")
    return None


def _first_line(text: str) -> str:
    """The most telling line of a storage error (an S3 <Code>, else the first line), shortened."""
    import re

    code = re.search(r"<Code>([^<]{1,80})</Code>", text)
    line = code.group(1) if code else text.strip().splitlines()[0]
    return line[:300]
