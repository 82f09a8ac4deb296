"""The results' ``series_key``: one 64-bit number per series, written with every result.

A series is one machine's history of one configuration and methodology: the columns of
:data:`SERIES_COLUMNS` (a null ``methodology`` is ``official``, as every report reads it). The
reports find each series' newest result among every result of the lake (10 million on the
bench), and grouping by one integer column costs a fraction of grouping by fourteen columns,
most of them text: that is what the key is for. Every writer of the results table fills it
(:func:`with_series_keys`: ingest, the published import, ``migrate-lake``); rows written before
it existed read it as null, and the reports find their series from the columns instead.

The key is stable across versions, processes and machines (it is stored): BLAKE2b with an
8-byte digest of the series' values, each written as its length in characters, ``:`` and its
text (integers in decimal; a null as ``-``), one after the other, read as a little-endian signed
64-bit integer. The text is a prefix-free code, so no two series have the same text whatever
their values hold; two series share a key only if their digests collide (about 1 in 10^11 for
12,000 series); equal series always share it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.lake.schema import MACHINE_KEY

#: What one series is: the machine, the configuration (config_id as well: two sweeps may run
#: the same cell under different scaling tags, each a history of its own) and the methodology.
SERIES_COLUMNS: tuple[str, ...] = (
    *MACHINE_KEY, "mode", "network", "dtype", "batch_size", "gpu_count", "num_nodes", "device_kind",
    "kvstore", "config_id", "methodology",
)
COLUMN = "series_key"
#: What a null methodology means (bench_tasks.methodology: records before the field were official)
_DEFAULT_METHODOLOGY = "official"
_NULL = "-"

Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def series_key(values: Sequence[object]) -> int:
    """The key of one series from its values in :data:`SERIES_COLUMNS` order (``None`` for null)."""
    values = list(values)
    if values[-1] is None:
        values[-1] = _DEFAULT_METHODOLOGY
    return _digest("".join(_NULL if v is None else f"{len(str(v))}:{v}" for v in values))


def _digest(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def with_series_keys(rows: Rows) -> Rows:
    """``rows`` (results columns) with ``series_key`` filled from its series columns (added when
    absent, replaced when present: the key is always the writer's, never taken from the input).
    Each distinct series is hashed once."""
    if rows.num_rows == 0:
        keys = pa.array([], pa.int64())
    else:
        texts = []
        for name in SERIES_COLUMNS:
            column = pc.cast(rows.column(name), pa.string())
            if name == "methodology":
                column = pc.fill_null(column, _DEFAULT_METHODOLOGY)
            coded = pc.binary_join_element_wise(pc.cast(pc.utf8_length(column), pa.string()), column, ":")
            texts.append(pc.fill_null(coded, _NULL))
        joined = pc.binary_join_element_wise(*texts, "")
        distinct = pc.unique(joined)
        digests = pa.array([_digest(text) for text in distinct.to_pylist()], pa.int64())
        keys = pc.take(digests, pc.index_in(joined, value_set=distinct))
    names = rows.schema.names
    if COLUMN in names:
        return rows.set_column(names.index(COLUMN), COLUMN, keys)
    return rows.append_column(COLUMN, keys)
