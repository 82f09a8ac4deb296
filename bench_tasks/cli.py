"""``python -m bench_tasks describe|score|train|sweep|sysinfo``: the worker's command line.

The contract (README.md, "The worker's command line") is what the orchestrator and the
scripts call. ``score``, ``train`` and ``sweep`` all build a list of configurations and run
it through ``bench_tasks.sweep`` (isolated runner processes, time limits, one record per
configuration); they differ only in where the matrix comes from. Bad flags exit with
status 2 and a message naming the flag and the allowed values; a finished sweep exits 0
whatever its cells' statuses (the records say what happened to each).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bench_tasks import runtime_check
from bench_tasks.compat import remove_prefix
from bench_tasks.configs import (
    DIST_KVSTORES,
    Config,
    ConfigError,
    expand_matrix,
    group_by_process,
    load_sweep_file,
    parse_devices,
    unique,
    validate_run_id,
)
from bench_tasks.constants import (
    DTYPES,
    ISOLATION_POLICIES,
    KVSTORES,
    MAX_BATCH_SIZE,
    MAX_CONFIG_TIMEOUT_S,
    MAX_MIN_TIME_S,
    MAX_REPEATS,
    MAX_TARGET_CV_PCT,
    MAX_TIMED_BATCHES,
    MAX_WARMUP_BATCHES,
    METHODOLOGIES,
    MIN_TARGET_CV_PCT,
    MODES,
    NETWORKS,
    SCALING_KINDS,
    STATUSES,
    TRAIN_LOOPS,
    WORKER_RUNTIME_ENV,
)

EXIT_USAGE = 2
DMLC_WORKER_VARIABLES = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                         "DMLC_NUM_WORKER")


def _list_of(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"{(bad or [text])[0]!r} is not one of {', '.join(allowed)}")
        return values
    return parse


def _batch_sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= MAX_BATCH_SIZE for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected positive integers up to {MAX_BATCH_SIZE} separated by commas, e.g. 1,2,4")
    return values


def _device_list(text: str) -> str:
    try:
        parse_devices(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _int_in(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        # isascii: str.isdigit accepts digits int() reads differently ("²"), and no sign or space
        if not (text.isascii() and text.isdigit()) or not minimum <= int(text) <= maximum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer in [{minimum}, {maximum}]")
        return int(text)
    return parse


def _number_in(minimum: float, maximum: float, unit: str, *,
               open_below: bool = True) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        low_ok = value > minimum if open_below else value >= minimum
        if not (low_ok and value <= maximum):  # also refuses nan and inf
            low = "(" if open_below else "["
            raise argparse.ArgumentTypeError(f"{text!r}: expected {unit} in {low}{minimum:g}, {maximum:g}]")
        return value
    return parse


_seconds = _number_in(0, MAX_CONFIG_TIMEOUT_S, "a number of seconds")


def _run_id(text: str) -> str:
    try:
        return validate_run_id(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", default="-", help="JSON Lines file to append to; - = stdout")
    parser.add_argument("--run-id", type=_run_id, help="id shared by every record (default: generated)")
    parser.add_argument("--timeout", type=_seconds, help="time limit per configuration, seconds")
    parser.add_argument("--isolation", choices=ISOLATION_POLICIES, default="mode",
                        help="one measuring process per mode and dtype across networks (default), per "
                             "network series, or per configuration; restarted after any failure")


def _add_matrix_flags(parser: argparse.ArgumentParser, *, mode: str | None, required: bool) -> None:
    if mode is None:
        parser.add_argument("--modes", type=_list_of(MODES), help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--networks", type=_list_of(NETWORKS), required=required,
                        help=f"comma list of {', '.join(NETWORKS)}")
    parser.add_argument("--batch-sizes", type=_batch_sizes, required=required,
                        help="comma list of global batch sizes, e.g. 1,2,4")
    parser.add_argument("--devices", type=_device_list, action="append",
                        help="device list, e.g. cpu, gpu:0 or gpu:0,gpu:1 (repeat the flag for "
                             "several lists); default cpu")
    parser.add_argument("--dtypes", "--dtype", dest="dtypes", type=_list_of(DTYPES),
                        help=f"comma list of {', '.join(DTYPES)}; default float32")
    parser.add_argument("--warmup", type=_int_in(0, MAX_WARMUP_BATCHES),
                        help="untimed warm-up batches (default 5)")
    parser.add_argument("--batches", type=_int_in(1, MAX_TIMED_BATCHES),
                        help="timed batches per repeat (default 10; with --min-time the minimum)")
    parser.add_argument("--repeats", type=_int_in(1, MAX_REPEATS),
                        help="timed repeats; median and CV (default 3; with --target-cv the minimum)")
    parser.add_argument("--methodology", choices=METHODOLOGIES,
                        help="official (default: fixed batch counts, MXNet's harness), robust (min "
                             "time 2 s, target CV 3 %%, max 10 repeats) or custom (the values below)")
    parser.add_argument("--min-time", dest="min_time_s", type=_number_in(0, MAX_MIN_TIME_S, "seconds"),
                        help="custom: keep timing each repeat until at least this many seconds")
    parser.add_argument("--target-cv", dest="target_cv_pct",
                        type=_number_in(MIN_TARGET_CV_PCT, MAX_TARGET_CV_PCT, "a percentage",
                                        open_below=False),
                        help="custom: add repeats until the coefficient of variation is under PCT %%")
    parser.add_argument("--max-repeats", type=_int_in(2, MAX_REPEATS),
                        help="custom, with --target-cv: at most this many repeats (default 10)")
    parser.add_argument("--scaling", choices=SCALING_KINDS,
                        help="weak: batch sizes are per device; strong: global batch held")
    if mode != "score":
        parser.add_argument("--kvstore", choices=KVSTORES,
                            help="kvstore for training (default device); dist_* need DMLC_* variables")
        parser.add_argument("--train-loop", choices=TRAIN_LOOPS,
                            help="official (default: accuracy metric updated every batch, as "
                                 "train_imagenet.py) or unsynchronised (no metric)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench_tasks",
                                     description="MXNet scoring and training benchmarks.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    describe = commands.add_parser("describe", help="input shape and parameter count of a network")
    describe.add_argument("--network", required=True, choices=NETWORKS)

    for mode in MODES:
        sub = commands.add_parser(mode, help=f"{mode} throughput over networks × batch sizes")
        _add_matrix_flags(sub, mode=mode, required=True)
        _add_run_flags(sub)

    sweep = commands.add_parser("sweep", help="a matrix from --config (JSON/YAML) or from flags")
    sweep.add_argument("--config", help="sweep file (format in README.md)")
    _add_matrix_flags(sweep, mode=None, required=False)
    _add_run_flags(sweep)

    commands.add_parser("sysinfo", help="host, CPU, GPUs, CUDA, cuDNN and MXNet build as JSON")
    # `_runner` (the measuring process a sweep starts) is no subcommand: main() hands it over
    # before parsing, so --help never lists it
    return parser


#: The internal command a sweep starts its measuring processes with (runner_process.py).
RUNNER_COMMAND = "_runner"
#: Commands that import MXNet (the networks, the measurements, the build sysinfo reports).
NEEDS_MXNET = ("describe", "score", "train", "sweep", "sysinfo")


def missing_worker_packages() -> list[str]:
    """The worker's packages this interpreter lacks (MXNet, numpy), without importing them."""
    import importlib.util

    return [name for name in ("mxnet", "numpy") if importlib.util.find_spec(name) is None]


def _not_a_worker_environment(command: str, missing: list[str]) -> int:
    print(f"bench-tasks {command}: this Python ({sys.executable}) has no {' and no '.join(missing)}; "
          "the worker needs its own environment with MXNet 1.9.1 and numpy < 1.24 (bench_tasks/"
          "requirements-cpu.txt, or requirements-gpu.txt on CUDA hosts), apart from Airflow's. Run "
          "`python -m bench_tasks ...` with that environment's interpreter (the local target's bench_python "
          "setting, GPUCOMPARE_BENCH_PYTHON; docs/install.md, 'Worker environment').", file=sys.stderr)
    return EXIT_USAGE


_MATRIX_FLAG_KEYS = {"networks": "networks", "batch_sizes": "batch_sizes", "dtypes": "dtypes",
                     "devices": "devices", "kvstore": "kvstore", "scaling": "scaling",
                     "warmup": "warmup", "batches": "batches", "repeats": "repeats",
                     "methodology": "methodology", "min_time_s": "min_time_s",
                     "target_cv_pct": "target_cv_pct", "max_repeats": "max_repeats",
                     "train_loop": "train_loop"}
#: The flag of each matrix key, so an error found in the matrix names what the user typed.
_FLAG_OF_KEY = {"min_time_s": "--min-time", "target_cv_pct": "--target-cv", "timeout_s": "--timeout",
                **{key: f"--{key.replace('_', '-')}" for key in _MATRIX_FLAG_KEYS.values()
                   if key not in ("min_time_s", "target_cv_pct")}}


def _expand_flags(args: argparse.Namespace, modes: list[str]) -> list[Config]:
    try:
        return unique(expand_matrix(_matrix_from_flags(args, modes), "flags"))
    except ConfigError as exc:
        key = remove_prefix(exc.where, "flags.")
        raise ConfigError(_FLAG_OF_KEY.get(key, exc.where), exc.message) from None


def _matrix_from_flags(args: argparse.Namespace, modes: list[str]) -> dict[str, Any]:
    matrix: dict[str, Any] = {"modes": modes}
    for attribute, key in _MATRIX_FLAG_KEYS.items():
        value = getattr(args, attribute, None)
        if value is not None:
            matrix[key] = value
    if args.timeout is not None:
        matrix["timeout_s"] = args.timeout
    return matrix


def configurations(args: argparse.Namespace) -> tuple[list[Config], str | None]:
    """The configurations a score/train/sweep command asks for, and the file's run id."""
    if args.command in MODES:
        return _expand_flags(args, [args.command]), None
    flags_given = [_FLAG_OF_KEY.get(k, f"--{k}") for k in ("modes", *_MATRIX_FLAG_KEYS)
                   if getattr(args, k, None) is not None]
    if args.config:
        if flags_given:
            raise ConfigError(flags_given[0], "use either --config or the matrix flags, not both")
        spec = load_sweep_file(args.config)
        configs = spec.configs
        if args.timeout is not None:
            configs = [dataclasses.replace(c, timeout_s=args.timeout) for c in configs]
        return configs, spec.run_id
    if args.modes is None or args.networks is None or args.batch_sizes is None:
        raise ConfigError("--config", "give a sweep file, or --modes, --networks and --batch-sizes")
    return _expand_flags(args, args.modes), None


def check_distributed(configs: list[Config]) -> None:
    """A dist kvstore joins its cluster once per process: one configuration per launch."""
    distributed = [c for c in configs if c.kvstore in DIST_KVSTORES]
    if not distributed:
        return
    if len(configs) > 1:
        raise ConfigError("--kvstore", f"{distributed[0].kvstore} runs exactly one configuration per "
                          f"launch (got {len(configs)}); launch the workers once per configuration")
    missing = [v for v in DMLC_WORKER_VARIABLES if not os.environ.get(v)]
    if missing:
        raise ConfigError("--kvstore", f"{distributed[0].kvstore} needs the DMLC_* environment of a "
                          f"parameter-server worker; missing {', '.join(missing)}")
    if os.environ["DMLC_ROLE"] != "worker":
        raise ConfigError("--kvstore", f"DMLC_ROLE is {os.environ['DMLC_ROLE']!r}; this command is "
                          "the worker (schedulers and servers run `python -c 'import mxnet'`)")


def _run(args: argparse.Namespace) -> int:
    from bench_tasks import sweep, sysinfo

    configs, file_run_id = configurations(args)
    check_distributed(configs)
    run_id = args.run_id or file_run_id or sweep.new_run_id()
    info = sysinfo.collect(with_mxnet=False)  # MXNet's part comes from the first runner
    # what is known without importing mxnet; the rest when the first measuring process is ready
    runtime_check.check(_runtime_label(), {**info.framework_build(), "features": None}, announce=False)
    writer = sweep.RecordWriter(args.output)
    try:
        runner = sweep.Sweep(group_by_process(configs), info=info, run_id=run_id, writer=writer,
                             isolation=args.isolation, image_shape_of=sweep.image_shape_text)
        records = runner.run()
    finally:
        writer.close()
    counts = collections.Counter(r["status"] for r in records)  # every status, gpu_busy included
    shown = ", ".join(f"{counts[status]} {status}" for status in STATUSES if counts[status]) or "none"
    print(f"{len(records)} records ({shown}) written to "
          f"{'stdout' if args.output == '-' else args.output}; run_id {run_id}",
          file=sys.stderr, flush=True)
    return 0


def _describe(args: argparse.Namespace) -> int:
    from bench_tasks import networks

    print(json.dumps(networks.describe(args.network), sort_keys=True))
    return 0


def _runtime_label() -> str:
    return os.environ.get(WORKER_RUNTIME_ENV, "").strip()


def _sysinfo(_args: argparse.Namespace) -> int:
    from bench_tasks import sysinfo

    info = sysinfo.collect()
    try:
        info.runtime_check = runtime_check.check(_runtime_label(), info.framework_build())
    finally:  # printed also when the check fails: what the build is, beside the line saying why
        print(json.dumps(info.to_json(), indent=2, sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == [RUNNER_COMMAND]:
        from bench_tasks import runner

        return runner.main()
    parser = build_parser()
    args = parser.parse_args(arguments)
    missing = missing_worker_packages() if args.command in NEEDS_MXNET else []
    if missing:
        return _not_a_worker_environment(args.command, missing)
    handlers = {"describe": _describe, "sysinfo": _sysinfo}
    try:
        return handlers.get(args.command, _run)(args)
    except ConfigError as exc:
        parser.error(str(exc))  # exits with status 2 and the usage line
    except runtime_check.RuntimeMismatch as exc:
        print(f"bench-tasks {args.command}: {exc}", file=sys.stderr)
    return EXIT_USAGE
