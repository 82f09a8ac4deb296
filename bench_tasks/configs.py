"""Benchmark configurations: parsing, validation and expansion of the sweep matrix.

A configuration is one cell of the benchmark matrix: mode × network × dtype × device list ×
batch size (plus the kvstore and scaling kind of training runs). Configurations come from
the command line (``score``, ``train``, ``sweep --modes ...``) or from a sweep file (JSON or
YAML, the format in README.md "The worker's command line"); both paths end in
:func:`expand_matrix`, so they validate the same way.

Batch sizes: ``batch_sizes`` are global batches (split over the devices), except

* ``scaling: weak`` (the per-device batch is held): a listed batch is per device, and the
  global batch is that times the number of devices;
* distributed kvstores (``dist_sync``, ``dist_device_sync``): a listed batch is this worker's
  batch (as ``train_imagenet.py --batch-size`` is), and the record's global batch is that
  times the number of workers, known only once the kvstore is up.

Standard library only (PyYAML is imported lazily, for YAML sweep files).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench_tasks.constants import (
    DEFAULT_CONFIG_TIMEOUT_S,
    DEFAULT_REPEATS,
    DEFAULT_TIMED_BATCHES,
    DEFAULT_WARMUP_BATCHES,
    DEVICE_KINDS,
    DEVICE_PATTERN,
    DTYPES,
    KVSTORES,
    MAX_BATCH_SIZE,
    MAX_CONFIG_TIMEOUT_S,
    MAX_REPEATS,
    MAX_TIMED_BATCHES,
    MAX_WARMUP_BATCHES,
    METHODOLOGIES,
    MODES,
    NETWORKS,
    RUN_ID_ALLOWED,
    RUN_ID_PATTERN,
    SCALING_KINDS,
    TRAIN_LOOPS,
)
from bench_tasks.methodology import MethodologyError, StopPolicy, resolve

DIST_KVSTORES: tuple[str, ...] = tuple(k for k in KVSTORES if k.startswith("dist"))
DEFAULT_TRAIN_KVSTORE = "device"

_DEVICE = re.compile(DEVICE_PATTERN)  # fullmatch only: "$" would accept a trailing newline
DEVICE_FORMS = "cpu, gpu, cpu:N or gpu:N, comma-separated (e.g. gpu:0,gpu:1)"

MATRIX_KEYS: tuple[str, ...] = (
    "modes", "networks", "batch_sizes", "dtypes", "devices", "kvstore", "scaling",
    "warmup", "batches", "repeats", "timeout_s",
    "methodology", "min_time_s", "target_cv_pct", "max_repeats", "train_loop",
)
TOP_LEVEL_KEYS: tuple[str, ...] = ("run_id", "matrix", *MATRIX_KEYS)


class ConfigError(ValueError):
    """Bad input; ``where`` names the flag or sweep-file key, the message the allowed values."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass(frozen=True)
class Config:
    """One cell of the matrix. ``batch_size`` is the batch as listed (see module docstring)."""

    mode: str
    network: str
    dtype: str
    batch_size: int
    devices: tuple[str, ...]
    kvstore: str | None
    scaling: str | None
    warmup: int = DEFAULT_WARMUP_BATCHES
    batches: int = DEFAULT_TIMED_BATCHES
    repeats: int = DEFAULT_REPEATS
    timeout_s: float = DEFAULT_CONFIG_TIMEOUT_S
    methodology: str = "official"
    min_time_s: float | None = None
    target_cv: float | None = None  # a fraction (0.03 = 3 %), as the record's cv
    max_repeats: int | None = None
    train_loop: str | None = None  # training only: official (default) | unsynchronised

    @property
    def stop_policy(self) -> StopPolicy:
        """The stopping values the measuring loop follows (bench_tasks.methodology)."""
        return StopPolicy(self.methodology, self.batches, self.repeats, self.min_time_s,
                          self.target_cv, self.max_repeats)

    @property
    def device_kind(self) -> str:
        return self.devices[0].split(":")[0]

    @property
    def distributed(self) -> bool:
        return self.kvstore in DIST_KVSTORES

    @property
    def worker_batch(self) -> int:
        """Images per step on this host (over all of its devices)."""
        if self.scaling == "weak":
            return self.batch_size * len(self.devices)
        return self.batch_size

    @property
    def config_id(self) -> str:
        """Stable, readable id of the cell; the same on every worker of a multi-node run."""
        devices = "+".join(d.replace(":", "") for d in self.devices)
        parts = [self.mode, self.network, self.dtype, f"b{self.batch_size}", devices,
                 self.kvstore or "nokv", self.scaling or "single"]
        # official / the official training loop keep the ids of schema 1; anything else is a
        # different cell (one sweep may measure the same cell under two methodologies)
        if self.methodology != "official":
            parts.append(self.methodology)
        if self.methodology == "custom":  # its values tell custom cells apart
            if self.min_time_s is not None:
                parts.append(f"t{self.min_time_s:g}s")
            if self.target_cv is not None:
                parts.append(f"cv{self.target_cv * 100:g}pct{self.max_repeats}")
        if self.train_loop not in (None, "official"):
            parts.append(self.train_loop)
        return "-".join(parts)

    @property
    def group_key(self) -> tuple[str, str, str]:
        """Configurations with the same key can share one measuring process (same symbol)."""
        return (self.mode, self.network, self.dtype)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["devices"] = list(self.devices)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Config:
        values = dict(data)
        values["devices"] = tuple(values["devices"])
        return cls(**values)


def parse_devices(text: str, where: str = "--devices") -> tuple[str, ...]:
    """``cpu`` → ('cpu:0',); ``gpu:0,gpu:1`` → ('gpu:0', 'gpu:1'). One kind, no repeats."""
    parts = [p.strip() for p in str(text).split(",")]
    devices: list[str] = []
    for part in parts:
        if part in DEVICE_KINDS:
            part = f"{part}:0"
        if not _DEVICE.fullmatch(part):
            raise ConfigError(where, f"{text!r} is not a device list; allowed: {DEVICE_FORMS}")
        devices.append(part)
    kinds = {d.split(":")[0] for d in devices}
    if len(kinds) > 1:
        raise ConfigError(where, f"{text!r} mixes cpu and gpu; allowed: {DEVICE_FORMS}")
    if len(set(devices)) != len(devices):
        raise ConfigError(where, f"{text!r} names a device twice; allowed: {DEVICE_FORMS}")
    return tuple(devices)


def _choice(value: Any, allowed: Sequence[str], where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(where, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _bounded_int(value: Any, where: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(where, f"{value!r} must be an integer in [{minimum}, {maximum}]")
    return value


def _seconds(value: Any, where: str, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= maximum:
        raise ConfigError(where, f"{value!r} must be a number of seconds in (0, {maximum:g}]")
    return float(value)


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(where, f"expected a non-empty list of strings, got {value!r}")
    return value


def _check_matrix_keys(matrix: Mapping[str, Any], where: str) -> None:
    """No unknown key, and the three axes that have no default are there."""
    unknown = sorted(set(matrix) - set(MATRIX_KEYS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown key; allowed: {', '.join(MATRIX_KEYS)}")
    for required in ("modes", "networks", "batch_sizes"):
        if required not in matrix:
            raise ConfigError(f"{where}.{required}", "missing")


def _choices(matrix: Mapping[str, Any], key: str, allowed: Sequence[str], where: str,
             default: list[str] | None = None) -> list[str]:
    """The matrix's list under ``key`` (or ``default``), each entry one of ``allowed``."""
    listed = _string_list(matrix[key] if default is None else matrix.get(key, default), f"{where}.{key}")
    return [_choice(value, allowed, f"{where}.{key}") for value in listed]


def _batch_sizes(matrix: Mapping[str, Any], where: str) -> list[int]:
    listed = matrix["batch_sizes"]
    if not isinstance(listed, list) or not listed:
        raise ConfigError(f"{where}.batch_sizes", f"expected a non-empty list of integers >= 1, "
                          f"got {listed!r}")
    return [_bounded_int(b, f"{where}.batch_sizes", 1, MAX_BATCH_SIZE) for b in listed]


def _optional_choice(matrix: Mapping[str, Any], key: str, allowed: Sequence[str], where: str) -> str | None:
    value = matrix.get(key)
    if value is not None:
        _choice(value, allowed, f"{where}.{key}")
    return value


def _measurement_counts(matrix: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Warm-up, timed batches, repeats and the per-configuration timeout, defaults filled in."""
    return {
        "warmup": _bounded_int(matrix.get("warmup", DEFAULT_WARMUP_BATCHES), f"{where}.warmup",
                               0, MAX_WARMUP_BATCHES),
        "batches": _bounded_int(matrix.get("batches", DEFAULT_TIMED_BATCHES), f"{where}.batches",
                                1, MAX_TIMED_BATCHES),
        "repeats": _bounded_int(matrix.get("repeats", DEFAULT_REPEATS), f"{where}.repeats", 1, MAX_REPEATS),
        "timeout_s": _seconds(matrix.get("timeout_s", DEFAULT_CONFIG_TIMEOUT_S), f"{where}.timeout_s",
                              MAX_CONFIG_TIMEOUT_S),
    }


def _stopping_rule(matrix: Mapping[str, Any], where: str, counts: Mapping[str, Any],
                   kvstore: str | None) -> dict[str, Any]:
    """The methodology's stopping fields (``bench_tasks.methodology.resolve``) for these counts."""
    methodology = _optional_choice(matrix, "methodology", METHODOLOGIES, where)
    try:
        policy = resolve(methodology, batches=counts["batches"], repeats=counts["repeats"],
                         min_time_s=matrix.get("min_time_s"), target_cv_pct=matrix.get("target_cv_pct"),
                         max_repeats=matrix.get("max_repeats"))
    except MethodologyError as exc:
        raise ConfigError(f"{where}.{exc.key}", exc.message) from None
    if kvstore in DIST_KVSTORES and policy.methodology != "official":
        # dist_sync steps are synchronous: workers stopping by their own clocks would hang
        raise ConfigError(f"{where}.methodology", f"{policy.methodology} with kvstore {kvstore}: every "
                          "worker must time the same batches; allowed: official")
    return {"methodology": policy.methodology, "min_time_s": policy.min_time_s,
            "target_cv": policy.target_cv, "max_repeats": policy.max_repeats}


def expand_matrix(matrix: Mapping[str, Any], where: str = "matrix") -> list[Config]:
    """Every configuration of one matrix (modes × networks × dtypes × devices × batches).

    Missing keys take the defaults: dtypes [float32], devices [cpu], kvstore ``device`` for
    training, no scaling, warm-up/batches/repeats/timeout from ``bench_tasks.constants``.
    """
    _check_matrix_keys(matrix, where)
    modes = _choices(matrix, "modes", MODES, where)
    networks = _choices(matrix, "networks", NETWORKS, where)
    dtypes = _choices(matrix, "dtypes", DTYPES, where, default=["float32"])
    device_lists = [parse_devices(d, f"{where}.devices")
                    for d in _string_list(matrix.get("devices", ["cpu"]), f"{where}.devices")]
    batch_sizes = _batch_sizes(matrix, where)
    kvstore = _optional_choice(matrix, "kvstore", KVSTORES, where)
    scaling = _optional_choice(matrix, "scaling", SCALING_KINDS, where)
    train_loop = _optional_choice(matrix, "train_loop", TRAIN_LOOPS, where)
    counts = _measurement_counts(matrix, where)
    stopping = _stopping_rule(matrix, where, counts, kvstore)
    configs = []
    for mode in modes:
        mode_kvstore = (kvstore or DEFAULT_TRAIN_KVSTORE) if mode == "train" else None
        mode_loop = (train_loop or "official") if mode == "train" else None
        for network in networks:
            for dtype in dtypes:
                for devices in device_lists:
                    for batch in batch_sizes:
                        configs.append(Config(mode, network, dtype, batch, devices,
                                              mode_kvstore, scaling, **counts, **stopping,
                                              train_loop=mode_loop))
    return configs


def unique(configs: Iterable[Config]) -> list[Config]:
    """Drop repeated cells (same config_id), keeping the first; order is kept."""
    seen: set[str] = set()
    kept = []
    for config in configs:
        if config.config_id not in seen:
            seen.add(config.config_id)
            kept.append(config)
    return kept


def group_by_process(configs: Sequence[Config]) -> list[Config]:
    """Order so that configurations sharing a measuring process are adjacent (stable)."""
    order: dict[tuple[str, str, str], int] = {}
    for config in configs:
        order.setdefault(config.group_key, len(order))
    return sorted(configs, key=lambda c: order[c.group_key])


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file: its run id (if given) and its configurations."""

    run_id: str | None
    configs: list[Config]


def parse_sweep(document: Any, where: str = "sweep file") -> SweepSpec:
    """Validate a loaded sweep document (see README) and expand it into configurations."""
    if not isinstance(document, dict):
        raise ConfigError(where, f"expected a mapping at the top level, got {type(document).__name__}")
    unknown = sorted(set(document) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{where}: {unknown[0]}", f"unknown key; allowed: {', '.join(TOP_LEVEL_KEYS)}")
    run_id = document.get("run_id")
    if run_id is not None:
        validate_run_id(run_id, f"{where}: run_id")
    defaults = {k: v for k, v in document.items() if k in MATRIX_KEYS}
    matrices = document.get("matrix", [{}] if defaults else None)
    if not isinstance(matrices, list) or not matrices:
        raise ConfigError(f"{where}: matrix", "expected a non-empty list of matrices")
    configs: list[Config] = []
    for index, matrix in enumerate(matrices):
        if not isinstance(matrix, dict):
            raise ConfigError(f"{where}: matrix[{index}]", "expected a mapping")
        configs.extend(expand_matrix({**defaults, **matrix}, f"{where}: matrix[{index}]"))
    return SweepSpec(run_id, unique(configs))


def load_sweep_file(path: str | Path) -> SweepSpec:
    """Read a JSON or YAML sweep file (by extension; JSON is tried first otherwise)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            document = _load_yaml(text)
        else:
            try:
                document = json.loads(text)
            except json.JSONDecodeError:
                document = _load_yaml(text)
    except ValueError as exc:
        raise ConfigError("--config", f"{path} is neither valid JSON nor YAML: {exc}") from exc
    return parse_sweep(document, where=str(path))


def _load_yaml(text: str) -> Any:
    import yaml  # only YAML sweep files need it; the worker environment has PyYAML

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


_RUN_ID = re.compile(RUN_ID_PATTERN)


def validate_run_id(value: Any, where: str = "--run-id") -> str:
    """A run id goes into every record, the lake's predicates and folder names: the one rule
    of ``constants.RUN_ID_PATTERN``."""
    if not isinstance(value, str) or not _RUN_ID.fullmatch(value):
        raise ConfigError(where, f"{value!r} is not a run id: {RUN_ID_ALLOWED}")
    return value
