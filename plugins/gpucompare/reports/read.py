"""The notebook API: the lake's tables and every report as pandas DataFrames.

    import gpucompare
    cost = gpucompare.read("cost_per_million", lake="s3://bucket/lake")
    history = gpucompare.read_history("best_value", reports="s3://bucket/reports")

Columns and types are those of the BI contract (docs/reports.md; the Parquet files
and the Athena DDL): each column is a pandas ``ArrowDtype`` of the report's Arrow type, so
``flags`` stays a list of strings, dates stay dates (``date32``), timestamps stay UTC and
integer columns keep their missing values without turning into floats.

``read`` builds the report from the lake on the spot (the same SQL as the nightly report,
a few seconds on a big lake); ``read_history`` reads the copies the reports DAG keeps under
``<reports>/report_history/`` (one per day: a report over time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gpucompare.lake.reading import TABLE_KINDS
from gpucompare.reports.report_set import DERIVED, REPORTS, ReportError, ReportOptions

if TYPE_CHECKING:
    import pandas as pd

#: Every name ``read`` accepts.
TABLES: tuple[str, ...] = (*TABLE_KINDS, *REPORTS, *DERIVED)


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a DataFrame with the same types (pandas ArrowDtype columns)."""
    import pandas as pd

    return table.to_pandas(types_mapper=pd.ArrowDtype)


def read_table(
    name: str,
    *,
    lake: str | None = None,
    as_of: int | str | None = None,
    currency: str | None = None,
    options: ReportOptions | None = None,
) -> pa.Table:
    """What :func:`read` returns, as an Arrow table."""
    from gpucompare import settings
    from gpucompare.reports.build import build_reports, options_from_settings
    from gpucompare.reports.inputs import results_table

    if name not in TABLES:
        raise ReportError(f"table {name!r} is not one of {', '.join(TABLES)}")
    uri = lake or settings.lake_uri()
    try:
        inputs = _inputs(uri, as_of)
    except Exception as exc:  # a store's failure (credentials, endpoint) as a LakeError saying what to do
        from gpucompare.lake.storage import explain_storage_error

        explained = explain_storage_error(exc, uri, writes=False)
        if explained is None or explained is exc:
            raise
        raise explained from None
    if name in TABLE_KINDS:
        if name == "results":
            return results_table(inputs)
        if name == "run_phases":
            from gpucompare.lake.phases import read_phases

            # a version number is the results table's; a timestamp applies to run_phases too
            return read_phases(inputs.lake, as_of if isinstance(as_of, str) else None)
        return {"prices": inputs.prices, "fx": inputs.fx, "published_scaling": inputs.published_scaling}[name]
    built = build_reports(
        inputs,
        currency=(currency or settings.currency()).upper(),
        options=options or options_from_settings(),
    )
    return built.tables[name]


def read(
    name: str,
    *,
    lake: str | None = None,
    as_of: int | str | None = None,
    currency: str | None = None,
    options: ReportOptions | None = None,
) -> pd.DataFrame:
    """One table as a pandas DataFrame.

    ``name``: a lake table (``results``, ``prices``, ``fx``, ``published_scaling``, ``run_phases``) or a
    report (``cost_per_million``, ``scaling``, ``throughput``, ``throughput_matrix``,
    ``best_value``, ``regressions``). ``lake``: local path or ``s3://bucket/prefix``
    (default: the ``GPUCOMPARE_LAKE`` setting). ``as_of``: the lake as it was at a version
    (int) or an ISO timestamp, passed to ``ReportInputs.from_lake``; None = now.
    ``currency`` (EUR | USD) and ``options`` (the ranking of best_value) default to the
    settings, as in the nightly report.

    Columns keep their Arrow types (``pd.ArrowDtype``). A list column (``flags``) gives Python
    lists through ``df["flags"].iloc[i]``, ``.tolist()`` and ``to_dict("records")``, but numpy
    arrays through ``.to_numpy()`` / ``df.values``: use the former to get lists.
    """
    return to_pandas(read_table(name, lake=lake, as_of=as_of, currency=currency, options=options))


def read_history(name: str, *, reports: str | None = None) -> pd.DataFrame:
    """Every day's copy of one report (``report_date`` column added), oldest first.

    ``reports``: the reports root the DAG writes to (default: the ``GPUCOMPARE_REPORTS``
    setting; local path or ``s3://``). Empty DataFrame when no history was kept yet.
    """
    import pyarrow.dataset as ds

    from gpucompare import settings
    from gpucompare.lake.tables import open_lake

    if name not in (*REPORTS, *DERIVED):
        raise ReportError(f"report {name!r} is not one of {', '.join((*REPORTS, *DERIVED))}")
    location = open_lake(reports or settings.reports_uri())
    folder = location.path("report_history", name)
    if location.fs.get_file_info(folder).type.name != "Directory":
        return to_pandas(pa.table({"report_date": pa.array([], pa.date32())}))
    partitioning = ds.partitioning(pa.schema([pa.field("report_date", pa.date32())]), flavor="hive")
    # list the days' files once and read exactly those: a second listing could see a day a writer
    # renamed in meanwhile, with columns the first listing's schema does not have
    fragments = list(ds.dataset(folder, filesystem=location.fs, format="parquet",
                                partitioning=partitioning).get_fragments())
    if not fragments:
        return to_pandas(pa.table({"report_date": pa.array([], pa.date32())}))
    # the days' files may differ in columns (a report gained one since): read them all by name,
    # a column missing from an older day is empty there
    columns = pa.unify_schemas(
        [fragment.physical_schema for fragment in fragments]
        + [pa.schema([pa.field("report_date", pa.date32())])],
        promote_options="permissive",
    )
    days = ds.dataset(
        [fragment.path for fragment in fragments], filesystem=location.fs, format="parquet",
        partitioning=partitioning, partition_base_dir=folder, schema=columns,
    )
    return to_pandas(days.to_table().sort_by("report_date"))


def _inputs(uri: str, as_of: int | str | None) -> Any:
    from gpucompare.reports.inputs import ReportInputs

    return ReportInputs.from_lake(uri, as_of=as_of)
