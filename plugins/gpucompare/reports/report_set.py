"""The built report set as plain data: what ``reports`` produces and the page renders.

This module sits below both :mod:`gpucompare.reports.build` (which builds the tables) and
:mod:`gpucompare.reports.page` (which turns them into strings), so the import direction is
build → publish → page → report_set, never back: the page renderer does not import the builder.

It holds the report names, the settings of a build (:class:`RegressionRule`,
:class:`ReportOptions`), the result (:class:`ReportSet`) and the documentation of every
report column (:data:`COLUMN_DOCS`, units included), which the Parquet files, the Athena
``COMMENT``s and the README share.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare import settings
from gpucompare.errors import PermanentError

#: The reports, in the order they are built (best_value reads cost_per_million).
REPORTS: tuple[str, ...] = (
    "cost_per_million", "scaling", "throughput", "best_value", "regressions", "projections", "campaign"
)
#: Tables written besides the reports themselves.
DERIVED: tuple[str, ...] = ("throughput_matrix", "throughput_by_batch")
#: Every table of the set: written as Parquet and CSV, and kept a copy of every day under
#: report_history/ (BI charts them over time); each has an Athena table.
HISTORY_TABLES: tuple[str, ...] = (*REPORTS, *DERIVED)
#: The batch sizes of throughput_matrix's columns: always these, never others, so its schema
#: is stable for BI and its width (and the report's memory) does not grow with the number of
#: batch sizes measured. Every batch size, in or outside this list, is a row of
#: throughput_by_batch (the long format BI reads for any size).
MATRIX_BATCHES: tuple[int, ...] = tuple(2**i for i in range(11))  # 1 … 1024
#: Where a result comes from: run by gpucompare, or imported from a publication.
ORIGINS: tuple[str, ...] = ("measured", "published")
#: The most runs --nights may pool.
MAX_NIGHTS = 365
#: Why a best_value row is shown but not ranked.
NOT_RANKED_REASONS: tuple[str, ...] = ("flagged", "old_published")


class ReportError(PermanentError):
    """Bad report settings (the message names the setting and the allowed values)."""


class ReportsIncomplete(PermanentError):
    """Some reports (or the page) failed; every other one was built and written. ``report_set``
    is the partial set, ``failures`` maps each failed part to what went wrong (also in summary.md
    and manifest.json)."""

    def __init__(self, report_set: ReportSet) -> None:
        self.report_set = report_set
        self.failures = dict(report_set.failures)
        listed = "; ".join(f"{name}: {message}" for name, message in self.failures.items())
        super().__init__(f"{len(self.failures)} part(s) of the report set failed: {listed}")


@dataclass(frozen=True)
class RegressionRule:
    """How the regressions report tells a drop from noise (see sql/regressions.sql)."""

    history_runs: int = 7  # N previous results compared with
    min_history: int = 3  # fewer ok results before → insufficient_history
    # k in k × 1.4826 × MAD: 2.5 with the U test as a second guard (scripts/regression_rule_sim.py:
    # a 10 % drop at CV 5 % is flagged 2 times in 3, not 1 in 2 as at 3; false alarms stay near 1 %)
    mad_factor: float = 2.5
    min_drop: float = 0.05  # a drop is never noise below this share of the median
    lookback_days: int = 28  # only this much history is read from the lake

    def __post_init__(self) -> None:
        """Checked on construction: a rule that exists is valid."""
        if self.history_runs < 1:
            raise ReportError(f"history_runs must be >= 1, got {self.history_runs}")
        if not 1 <= self.min_history <= self.history_runs:
            raise ReportError(f"min_history must be between 1 and history_runs, got {self.min_history}")
        if self.mad_factor <= 0 or not 0 <= self.min_drop < 1:
            raise ReportError("mad_factor must be > 0 and min_drop in [0, 1)")
        if self.lookback_days < 1:
            raise ReportError(f"lookback_days must be >= 1, got {self.lookback_days}")


@dataclass(frozen=True)
class ReportOptions:
    """What the best_value ranking admits (every row stays in the tables either way).

    * ``published_max_age_years``: published figures whose result date is more than this
      many years before ``report_date`` are shown but not ranked (``old_published``);
    * ``rank_old_published``: rank them anyway;
    * ``rank_flagged``: rank rows carrying flags (suspicions of the published import) too;
    * ``report_date``: the day the ages are counted from (default: today, UTC);
    * ``nights``: intervals over the last N runs, the night as the unit (``--nights``);
    * ``practical_margin``: the margin of best_value's verdicts (``GPUCOMPARE_PRACTICAL_MARGIN``);
    * ``with_projections``: also build ``best_value_with_projections``, best_value with the
      projected machines of the projections report added (labelled origin ``projected``).
    """

    published_max_age_years: int = 3
    rank_old_published: bool = False
    rank_flagged: bool = False
    report_date: dt.date | None = None
    with_projections: bool = False
    #: the samples of the last N ok runs of each configuration on its machine are pooled (1: the
    #: latest run's repeats alone); see reports/uncertainty.py
    nights: int = 1
    #: the practical margin of best_value's verdicts, a fraction (reports/verdicts.py)
    practical_margin: float = 0.03

    def __post_init__(self) -> None:
        """Checked on construction: options that exist are valid."""
        if isinstance(self.published_max_age_years, bool) or not isinstance(
            self.published_max_age_years, int
        ):
            raise ReportError(
                "published_max_age_years must be a whole number of years, "
                f"got {self.published_max_age_years!r}"
            )
        whole = isinstance(self.nights, int) and not isinstance(self.nights, bool)
        if not whole or not 1 <= self.nights <= MAX_NIGHTS:
            raise ReportError(f"nights must be a whole number from 1 to {MAX_NIGHTS}, got {self.nights!r}")
        margin = self.practical_margin
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not (
                0 <= margin <= settings.MAX_PRACTICAL_MARGIN):
            raise ReportError(f"practical_margin must be a number from 0 to {settings.MAX_PRACTICAL_MARGIN}, "
                              f"got {margin!r}")
        if not 0 <= self.published_max_age_years <= settings.MAX_PUBLISHED_AGE_YEARS:
            raise ReportError(f"published_max_age_years must be between 0 and "
                              f"{settings.MAX_PUBLISHED_AGE_YEARS}, got {self.published_max_age_years}")

    @property
    def today(self) -> dt.date:
        return self.report_date or dt.datetime.now(dt.UTC).date()

    @property
    def published_cutoff(self) -> dt.date:
        """Published figures dated before this day are 'old' (not ranked unless asked)."""
        today = self.today
        year = today.year - self.published_max_age_years
        try:
            return today.replace(year=year)
        except ValueError:  # 29 February in a year that has none
            return today.replace(year=year, day=28)


@dataclass
class ReportSet:
    """The built reports (Arrow tables), where they were written, and how long each took."""

    tables: dict[str, pa.Table]
    currency: str
    rule: RegressionRule
    rows_scanned: int
    newest_date: dt.date | None
    #: results files read to find each series' newest partition (the others came from the lake's
    #: report cache: reports.newest); None before the scan
    files_read: int | None = None
    options: ReportOptions = field(default_factory=ReportOptions)
    timings: dict[str, float] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    #: what the set was built from: the lake, ``as_of`` and the table versions read
    #: (``ReportInputs.manifest``; written as manifest.json and named in summary.md)
    manifest: dict[str, object] = field(default_factory=dict)
    #: the parts that failed (a report, ``index.html``, ``summary.md``…) → what went wrong; a
    #: failed report has no table in ``tables``
    failures: dict[str, str] = field(default_factory=dict)
    #: rows of the page's view written while the other reports were still being built
    #: (``page_view.prepare_rows``: part name → rows); the page writes any part missing here
    prepared: dict[str, Any] = field(default_factory=dict)

    def fail(self, name: str, exc: BaseException) -> None:
        """Record that ``name`` failed with ``exc`` (the rest of the set goes on)."""
        text = " ".join(str(exc).split())[:500]
        self.failures[name] = f"{type(exc).__name__}: {text}" if text else type(exc).__name__

    @property
    def missing_prices(self) -> pa.Table:
        """cost_per_million rows without a usable price (no price, or no exchange rate)."""
        table = self.tables.get("cost_per_million")
        if table is None or "price_source" not in table.column_names:
            return pa.table({"price_source": pa.array([], pa.string())})
        return table.filter(pc.is_in(table["price_source"], pa.array(["missing", "missing_fx"])))

    def provenance(self) -> dict[str, dict[str, tuple[int, dt.date | None]]]:
        """Per report: ``{origin: (rows, newest result_date)}`` for measured and published rows
        (published_curve rows of scaling count as published; they carry no date)."""
        found: dict[str, dict[str, tuple[int, dt.date | None]]] = {}
        for name in (*REPORTS, *DERIVED):
            table = self.tables.get(name)
            if table is None or "result_date" not in table.column_names:
                continue
            if "origin" not in table.column_names:  # regressions: measured results only
                table = table.append_column("origin", pa.array(["measured"] * table.num_rows, pa.string()))
            per_origin: dict[str, tuple[int, dt.date | None]] = {}
            for origin in ORIGINS:
                allowed = [origin, "published_curve"] if origin == "published" else [origin]
                chosen = table.filter(pc.is_in(table["origin"], pa.array(allowed)))
                newest = pc.max(chosen["result_date"]).as_py() if chosen.num_rows else None
                per_origin[origin] = (chosen.num_rows, newest)
            found[name] = per_origin
        return found


# ---- column documentation (Parquet field metadata, Athena COMMENTs, README) -----------------
#: Every column of every report, with its unit where it has one. Shared by name: a column
#: means the same in every report it appears in (a test checks that each has a doc).
COLUMN_DOCS: dict[str, str] = {
    "provider": "provider of the machine (aws, leadergpu, local, nvidia, ...)",
    "instance_type": "the provider machine name (g5.xlarge, ltbv14, ...)",
    "region": "provider region; empty where none applies",
    "market": "on_demand | spot",
    "gpu_model": "GPU model; empty for CPU runs (projections: the canonical name of the GPU model table)",
    "worker_runtime": "the software stack that produced the figure (data/runtimes.csv: pip-cu112, ngc-24.06, "
                      "cpu); empty for published figures and records older than schema 3",
    "previous_runtime": "regressions: the worker runtime of the result before the latest; when it differs "
                        "from worker_runtime the verdict is software_stack_changed, never a regression",
    "device_kind": "gpu | cpu: what ran the network (a CPU row has gpu_count 1 = one CPU device)",
    "gpu_count": "devices used over all nodes (GPUs; 1 for a CPU run)",
    "num_nodes": "hosts the run used (a run over N nodes rents N instances)",
    "mode": "score (inference) | train",
    "network": "the network benchmarked (alexnet, resnet-50, ...)",
    "dtype": "float32 | float16",
    "batch_size": "global batch: images per step over all devices and nodes",
    "per_device_batch": "batch_size / gpu_count",
    "methodology": "how the figure was timed: official (fixed 5 + 10 batches as in the MXNet "
    "harness; also every published figure and every result recorded before the field existed) | "
    "robust (at least 2 s per repeat, repeats until the CV is under 3 %, at most 10) | custom (the "
    "stopping values recorded). Figures of different methodologies are never ranked, paired or "
    "compared with each other",
    "images_per_sec": "throughput, images per second",
    "cv": "coefficient of variation of the repeats, a fraction (0.01 = 1 %)",
    "status": "ok, or why the cell did not run (oom, batch_smaller_than_devices, ...)",
    "seconds_per_million": "seconds to process 1,000,000 images (10^6 / images_per_sec)",
    "price_per_hour": "price of the machine(s) per hour in the report currency (per instance x num_nodes)",
    "cost_per_million": "cost of 1,000,000 images in the report currency "
    "(price_per_hour x seconds_per_million / 3600)",
    "currency": "currency of every money column: EUR | USD",
    "price_source": "source of the price row; declared (a price the user declared for a machine of their "
    "own: see price_note), missing (no price) or missing_fx (no exchange rate)",
    "price_note": "declared prices: the label the user gave and how the hourly price was made (per hour, per "
    "month / 730 h, or an amortised purchase), starting with declared:; empty for other prices",
    "price_effective_from": "price date: the day the price used became valid (latest <= result_date; "
    "projections: latest <= the report date)",
    "price_currency": "currency the price was listed in",
    "fx_rate": "exchange rate used, 1 price_currency = fx_rate currency",
    "origin": "measured (run by gpucompare) | published (imported from a publication) | "
    "published_curve (scaling: a speedup curve from a white paper) | projected "
    "(best_value_with_projections: a measured throughput priced on another machine with the same GPUs)",
    "result_source": "where the figure comes from: the source of the run, or the publication",
    "target": "where it ran: local | ssh | ec2, or published",
    "measured_at": "when the result was measured, UTC timestamp; published figures: the publication date",
    "result_date": "result date: the UTC day of the measurement, or the publication date",
    "flags": "suspicions raised by the published import (list of decimal_comma, outlier_vs_neighbours, "
    "batch_scaled_x8); empty list when none. In CSV: joined, separated by semicolons",
    "epoch_seconds": "training: seconds per ImageNet epoch (1,281,167 images / images_per_sec)",
    "epoch_cost": "training: cost of one ImageNet epoch in the report currency",
    "epochs90_seconds": "training: seconds for 90 ImageNet epochs",
    "epochs90_hours": "training: hours for 90 ImageNet epochs",
    "epochs90_cost": "training: cost of 90 ImageNet epochs in the report currency",
    "framework": "framework of the figure (MXNet)",
    "scaling": "strong (global batch held) | weak (per-device batch held)",
    "baseline_batch": "batch size of the 1-GPU baseline run",
    "baseline_images_per_sec": "throughput of the 1-GPU baseline, images per second",
    "baseline_instance_type": "machine of the 1-GPU baseline",
    "speedup": "images_per_sec / baseline_images_per_sec (ratio, 1 = as fast as one GPU)",
    "efficiency": "speedup / gpu_count, a fraction (1.0 = linear scaling)",
    "rank": "1 = cheapest per million among the ranked rows of the network and mode; empty when not ranked",
    "ranked": "true when the row takes part in the ranking",
    "not_ranked_reason": "why a row is shown but not ranked: flagged (it carries flags) | "
    "old_published (a published figure older than the age limit of the report); empty when ranked",
    "on_pareto_front": "true unless another ranked machine is no dearer per hour and no slower, and "
    "better in one; false for rows not ranked",
    "config_id": "the stable id (set by the worker) of the benchmark cell",
    "history_runs": "ok results in the history compared with (count)",
    "history_from": "date of the oldest result in the history",
    "history_median": "median throughput of the history, images per second",
    "history_mad": "median absolute deviation of the history, images per second",
    "noise": "night-to-night noise of the history, images per second: k x 1.4826 x MAD (the statistical "
    "bound of a drop)",
    "floor": "practical floor, images per second: min_drop x history_median; a drop beyond max(noise, floor) "
    "is a regression, one beyond the noise but within the floor is significant_below_floor",
    "build_changed": "regressions: true when the result before the latest ran the same worker runtime but "
    "another framework build (MXNet build, CUDA, cuDNN, image): a new baseline, software_stack_changed",
    "change": "images_per_sec / history_median - 1, a fraction (-0.1 = 10 % slower)",
    "regression": "true for verdict regression or failed",
    "history_samples": "regressions: repeat samples of the history compared with (count)",
    "p_value": "regressions: two-sided Mann-Whitney U p-value of the latest repeats against those of the "
    "history; a regression, improvement or significant_below_floor needs p < 0.05 besides the thresholds; "
    "empty where not tested (steady rows, or sample sizes that can never reach 5 %: then the thresholds "
    "alone decide, and no drop within the floor is claimed)",
    "report_date": "history tables: the day the report was built (Hive partition)",
    # uncertainty and energy (reports/evidence.py, reports/verdicts.py; reports/uncertainty.py stages them)
    "images_per_sec_low": "lower end of the 95 % interval of the throughput, images per second: a t interval "
    "on the log scale; what it covers is interval_covers (one night: around the geometric mean of the "
    "repeats, noise pooled over the configurations of the run; --nights N: over the medians of the nights, "
    "the night as the unit); empty when there is none, and then interval_reason says why",
    "images_per_sec_high": "upper end of the 95 % interval of the throughput, images per second (see "
    "images_per_sec_low); empty when there is none (interval_reason says why)",
    "cost_per_million_low": "lower end of the 95 % interval of cost_per_million: the lowest price of the "
    "run window (price_per_hour_low) over images_per_sec_high; interval_parts says what it covers; empty "
    "when there is no throughput interval",
    "cost_per_million_high": "upper end of the 95 % interval of cost_per_million: the highest price of the "
    "run window (price_per_hour_high) over images_per_sec_low; empty when there is no throughput interval",
    "interval_covers": "what the interval is about, in words: one night, the instance measured that night "
    "(the repeats on it; another instance of the type may differ by the night-to-night spread) | <N> nights "
    "of this type (--nights: N fresh instances, the night as the unit); empty when there is no interval",
    "interval_reason": "why a figure has no interval: 1 run: no interval (a single repeat) | published "
    "figure | projected figure | no samples recorded | a sample is not positive | not run: <status>; empty "
    "when it has one",
    "interval_df": "degrees of freedom of the t interval (the pooled noise of a run has many; own repeats: "
    "n - 1; nights: N - 1); empty without an interval",
    "noise_basis": "where the noise level of the interval comes from: run (pooled over the configurations "
    "of the run on that machine whose noise passes an F test against that of the others, 1 % level) | own "
    "(the repeats of this configuration alone: noisier than the others of the run, or alone) | nights (the "
    "spread of the night medians); empty without an interval",
    "noise_cv": "the noise level used: SD of the log of one repeat (nights: of the figure of one night), "
    "about the coefficient of variation (0.01 = 1 %); empty without an interval",
    "interval_parts": "what the cost interval covers: throughput (the price is a fixed list price) | "
    "throughput+price (spot: also the price range during the run window, and with --nights each night "
    "priced at its own price); empty when there is no interval",
    "price_per_hour_low": "the lowest price per hour during the run window in the report currency (spot "
    "prices move; on demand: price_per_hour)",
    "price_per_hour_high": "the highest price per hour during the run window in the report currency (spot "
    "prices move; on demand: price_per_hour)",
    "samples": "repeat samples behind the figure (count; with --nights, over every night); empty for a "
    "figure without samples (published)",
    "nights": "nights (runs, each a fresh instance) behind the figure (count; at most the --nights N of the "
    "report); empty without samples",
    "verdict": "regressions: regression | significant_below_floor (a significant drop smaller than the "
    "floor: reported, not a regression) | improvement | steady | failed | not_run | insufficient_history | "
    "software_stack_changed (another runtime or build than the result before: a new baseline). "
    "best_value: best | dearer (the 95 % interval of cost_ratio lies above 1 + the practical margin) | "
    "equivalent (its 90 % interval lies within [1 / (1 + margin), 1 + margin]: two one-sided tests at 5 %) | "
    "undetermined (neither; settle_with says what would settle it); empty when not ranked",
    "cost_ratio": "best_value: cost_per_million / that of the best ranked row of the network, mode and "
    "methodology (1 for the best; 1.10 = 10 % dearer); empty when not ranked",
    "cost_ratio_low": "best_value: lower end of the 95 % interval of cost_ratio (throughput noise of both "
    "rows, Welch t on the log scale, and both price ranges); empty for the best and where a side has no "
    "interval",
    "cost_ratio_high": "best_value: upper end of the 95 % interval of cost_ratio; empty for the best and "
    "where a side has no interval",
    "settle_with": "best_value, undetermined rows: how many more repeats (one night) or nights (--nights) "
    "of each machine would most likely settle the verdict (80 % power if the observed ratio and noise are "
    "the truth), or why measuring cannot; empty otherwise",
    "energy_method": "how the energy was measured: nvml_energy_counter | nvml_power_sampling | rapl, or "
    "unavailable: <reason> when it was not",
    "avg_power_watts": "average power of the devices used over the timed batches, watts; empty when not "
    "measured",
    "joules_per_image": "energy per image over the timed batches, joules (energy_joules / (timed_batches x "
    "batch_size)); empty when not measured, never 0",
    "kwh_per_million": "energy of 1,000,000 images, kWh (joules_per_image x 10^6 / 3.6 x 10^6); empty when "
    "not measured",
    "gco2e_per_million": "grid emissions of 1,000,000 images, grams CO2e (kwh_per_million x the gCO2e/kWh "
    "of the region, data/carbon/grid_intensity.csv); empty without a measurement or a region in that table",
    "basis": "projections: projected = the throughput of a measured result priced on a catalog machine "
    "with the same GPU model and GPUs per instance (never ranked with measured rows)",
    "measured_machine": "projections: true when the catalog machine is the very instance type measured",
    "measured_provider": "projections: provider of the machine the projected result was measured on",
    "measured_instance_type": "projections: instance type the projected result was measured on",
    "measured_region": "projections: region of the measured machine; empty where none applies",
    "measured_market": "projections: market of the measured machine (on_demand | spot)",
    "measured_gpu_model": "projections: the GPU name the measured host reported (nvidia-smi)",
    "run_id": "the id the orchestrator gave one run of a target (projections: the run that measured the "
    "result)",
    "price_covers": "projections: instance (the price of the whole machine) | gpus_only (the catalog "
    "prices the GPUs alone, e.g. GCP: the host VM is billed on top, so the cost is a lower bound)",
    # campaign (sql/campaign.sql): what each target's night cost, phase by phase
    "night": "campaign: the UTC day the first phase of the run began",
    "kind": "kind of target: local | ssh | ec2",
    "dag_run_id": "the Airflow run, if any",
    "started_at": "campaign: start of the first phase of the run, UTC timestamp",
    "finished_at": "campaign: end of the last phase of the run, UTC timestamp",
    "configurations": "configurations measured ok in the run (count)",
    "failed_phases": "phases of the run that failed, retried attempts included (count)",
    "torn_down": "true when the teardown of the run finished ok",
    "billed_seconds": "seconds paid for: ec2 from launch to termination; ssh and local the wall time of "
    "the sweeps",
    "timed_seconds": "seconds inside timed batches, summed over the configurations of the run",
    "timed_share": "timed_seconds / the wall time of the sweeps (sweep_seconds, plus the seconds of the "
    "configurations finished on machines lost later), a fraction (0.75 = 75 %)",
    "overhead_ratio": "billed_seconds / timed_seconds (1 = every billed second was timed)",
    "provision_seconds": "provisioning: request to SSH or SSM ready, seconds (every attempt)",
    "deploy_seconds": "deploy: worker bundle and environment, seconds",
    "pull_seconds": "image pull of a container runtime, timed apart from its deploy, seconds",
    "sweep_seconds": "sweeps: wall time of the worker, seconds (a sweep whose machine was lost is in "
    "reclaim_seconds)",
    "setup_seconds": "configurations: process start, symbol, bind, parameters, input, seconds",
    "warmup_seconds": "configurations: warm-up batches, seconds",
    "sweep_other_seconds": "sweep seconds outside those of the configurations (start-up, failed cells), "
    "seconds",
    "reclaims": "machines lost mid-sweep, ec2 spot reclaims (count; each replaced unless past max_reclaims)",
    "reclaim_seconds": "reclaims: the interrupted steps of the lost machines and the launch and deploy "
    "of their replacements, less the configurations the lost machines finished (kept), seconds",
    "teardown_seconds": "teardown: giving the machine back, seconds",
    "idle_seconds": "ec2: billed seconds outside every phase (waits between tasks, collect)",
    "provision_cost": "cost of the billed provisioning seconds in the report currency; empty when unpriced",
    "deploy_cost": "cost of the billed deploy seconds in the report currency; empty when unpriced",
    "pull_cost": "cost of the billed pull seconds in the report currency; empty when unpriced",
    "setup_cost": "cost of the setup seconds of the configurations in the report currency; empty when "
    "unpriced",
    "warmup_cost": "cost of the warm-up seconds in the report currency; empty when unpriced",
    "timed_cost": "cost of the timed seconds in the report currency; empty when unpriced",
    "sweep_other_cost": "cost of sweep_other_seconds in the report currency; empty when unpriced",
    "reclaim_cost": "cost of the billed reclaim_seconds in the report currency; empty when unpriced",
    "teardown_cost": "cost of the billed teardown seconds in the report currency; empty when unpriced",
    "idle_cost": "cost of idle_seconds in the report currency; empty when unpriced",
    "billed_cost": "cost of billed_seconds in the report currency (the sum of the phase costs); "
    "empty when unpriced",
}


def matrix_column_doc(name: str) -> str | None:
    """The doc of a throughput_matrix batch column (``batch_<n>_images_per_sec`` / ``_status``)."""
    if name.startswith("batch_") and name.endswith("_images_per_sec"):
        batch = name[len("batch_") : -len("_images_per_sec")]
        return f"images per second at batch size {batch}; empty when the cell did not run"
    if name.startswith("batch_") and name.endswith("_status"):
        batch = name[len("batch_") : -len("_status")]
        return f"status of the cell at batch size {batch} (ok, oom, ...); empty when not measured"
    return None


def column_doc(name: str) -> str | None:
    """The documentation of a report column (None: undocumented)."""
    return COLUMN_DOCS.get(name) or matrix_column_doc(name)


def with_docs(table: pa.Table) -> pa.Table:
    """The table with each column's doc (and unit) as Arrow field metadata ``doc``."""
    fields = []
    for column in table.schema:
        doc = column_doc(column.name)
        fields.append(column.with_metadata({"doc": doc}) if doc else column)
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=table.schema.metadata))
