"""What a replacement machine still has to sweep after the run's machine was lost mid-sweep (a spot
reclaim, an instance that vanished): every configuration without an ``ok`` record, in the order
the sweep would have run them.

The lost machine's ``ok`` records are kept; everything else runs again on the replacement (a cell
that failed or timed out may have failed because of the reclaim itself), so the run's records
cover every configuration exactly once: :func:`kept_records` is the lost machine's share,
:func:`remaining_sweep` the replacement's. The remaining sweep is written as one matrix entry per
cell, each a copy of the entry it came from narrowed to that cell (every other key, methodology
and counts included, stays as written), so the worker gives each cell the same ``config_id``
(``bench_tasks.configs.Config.config_id``) as the first sweep did.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from bench_tasks.configs import MATRIX_KEYS, parse_sweep

#: the matrix keys whose lists multiply into cells, in the order ``expand_matrix`` nests them
_PRODUCT_KEYS = ("modes", "networks", "dtypes", "devices", "batch_sizes")
_PRODUCT_DEFAULTS = {"dtypes": ["float32"], "devices": ["cpu"]}


def ok_config_ids(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The configurations a machine measured to the end (``status`` ok)."""
    return {str(record["config_id"]) for record in records if record.get("status") == "ok"}


def kept_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The lost machine's records that stand: its ``ok`` ones (the others run again)."""
    return [record for record in records if record.get("status") == "ok"]


def _cells(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``entry`` narrowed to each of its cells (one value per product key), in expansion order."""
    lists = [entry.get(key, _PRODUCT_DEFAULTS.get(key)) for key in _PRODUCT_KEYS]
    return [{**entry, **{key: [value] for key, value in zip(_PRODUCT_KEYS, combination, strict=True)}}
            for combination in itertools.product(*lists)]


def remaining_sweep(sweep_config: Mapping[str, Any], done: set[str]) -> dict[str, Any] | None:
    """The sweep config of the cells not in ``done`` (config ids), None when none is left.

    ``sweep_config`` must be one the worker accepts (it is parsed here as the worker parses it)."""
    parse_sweep(dict(sweep_config), where="sweep_config")
    defaults = {key: value for key, value in sweep_config.items() if key in MATRIX_KEYS}
    entries = sweep_config.get("matrix", [{}] if defaults else [])
    remaining, seen = [], set(done)
    for entry in entries:
        for cell in _cells({**defaults, **entry}):
            (config,) = parse_sweep({"matrix": [cell]}, where="sweep_config").configs
            if config.config_id not in seen:  # a cell listed twice runs once, as in the first sweep
                seen.add(config.config_id)
                remaining.append(cell)
    if not remaining:
        return None
    head = {key: value for key, value in sweep_config.items() if key not in MATRIX_KEYS and key != "matrix"}
    return {**head, "matrix": remaining}
