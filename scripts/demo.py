"""``make demo``: one night of gpucompare on this machine, then the reports.

Steps (each Airflow command's output goes to ``.airflow/demo-logs/<step>.log``):

1. the Airflow metadata database (SQLite under ``.airflow/``), migrated;
2. the pool ``gpucompare_instances`` (slots = ``max_instances`` of the fleet file);
3. ``airflow dags test gpucompare_nightly``: the fleet file's enabled targets (the ``local``
   target with the small ``demo`` profile) → ``./lake``;
4. ``python -m gpucompare import-published``: the published reference figures (idempotent);
5. ``python -m gpucompare import-catalog --shipped``: the shipped price catalog samples of other
   providers (gcp, azure, lambda, runpod, nebius; idempotent), which the projections report reads;
6. ``python -m gpucompare add-price``: a declared price for this machine (``local/local-cpu``),
   labelled as what it is, an example price for the demo machine, so the first page ranks
   something and every report says the price is declared (``price_source`` ``declared``);
7. ``airflow dags test gpucompare_reports`` → ``./reports/<date>/`` and ``./reports/latest``;
8. a cost-per-million table in the terminal and the path of ``reports/latest/index.html``.

Every step finds the lake and the reports through the settings (``GPUCOMPARE_LAKE``,
``GPUCOMPARE_REPORTS``: ``./lake`` and ``./reports``, set here and by the Makefile), as the
DAGs do; no step passes ``--lake``.

Run twice, it gives the same reports plus the second night's data: each ``dags test`` is a
new DAG run with its own run id, so its results are kept beside the first run's (both dated
today), while re-ingesting one run replaces its own files and the published figures are
imported idempotently, so nothing is duplicated.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

ENV_DEFAULTS = {
    "AIRFLOW_HOME": str(REPO_ROOT / ".airflow"),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "GPUCOMPARE_BENCH_PYTHON": str(REPO_ROOT / ".venv-bench" / "bin" / "python"),
    "GPUCOMPARE_LAKE": str(REPO_ROOT / "lake"),
    "GPUCOMPARE_REPORTS": str(REPO_ROOT / "reports"),
    # the deployment's name is required (issue 19); the demo's own
    "GPUCOMPARE_DEPLOYMENT": "local-demo",
}
#: The demo machine's declared price: an example, and labelled so wherever it is used.
DEMO_PRICE = ("--provider", "local", "--instance-type", "local-cpu", "--per-month", "25", "--currency", "EUR",
              "--from", "2026-01-01", "--label", "example price for this demo machine")
#: Columns of the terminal table: (header, cost_per_million column, width).
TABLE = (("provider", "provider", 9), ("machine", "instance_type", 10), ("GPU", "gpu_model", 11),
         ("mode", "mode", 5), ("network", "network", 12), ("batch", "batch_size", 5),
         ("images/s", "images_per_sec", 9), ("per 1M images", "seconds_per_million", 13),
         ("cost / 1M", "cost_per_million", 10), ("result date", "result_date", 11),
         ("price date", "price_effective_from", 10), ("source", "result_source", 28))


class DemoError(RuntimeError):
    pass


def environment() -> dict[str, str]:
    env = dict(os.environ)
    for name, value in ENV_DEFAULTS.items():
        env.setdefault(name, value)
    return env


def run_step(name: str, command: list[str], env: dict[str, str], log_dir: Path) -> float:
    """Run one command with its output in ``<log_dir>/<name>.log``; its tail if it fails."""
    log_path = log_dir / f"{name}.log"
    started = time.monotonic()
    print(f"  {name:<18} ", end="", flush=True)
    with open(log_path, "w") as log:
        done = subprocess.run(command, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        print(f"FAILED after {elapsed:.0f} s")
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        raise DemoError(f"{' '.join(command[:4])} exited with {done.returncode}; "
                        f"the end of {log_path}:\n" + "\n".join(tail))
    print(f"ok ({elapsed:.0f} s)")
    return elapsed


def duration(seconds: str) -> str:
    if not seconds:
        return "-"
    total = round(float(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def cell(row: dict[str, str], column: str, currency: str) -> str:
    value = row.get(column, "")
    if column == "seconds_per_million":
        return duration(value)
    if column == "images_per_sec":
        return f"{float(value):.2f}" if value else "-"
    if column == "cost_per_million":
        return f"{float(value):.3f} {currency}" if value else "no price"
    if column == "gpu_model":
        return value or ("(cpu)" if row.get("device_kind") == "cpu" else "")
    if column == "price_effective_from":
        return value or "-"
    return value


def cost_table(csv_path: Path) -> str:
    """Tonight's measured rows, then the published cost table (scoring at batch 32)."""
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    measured = [r for r in rows if r["target"] != "published"]
    measured.sort(key=lambda r: r["result_date"], reverse=True)
    published = [r for r in rows if r["target"] == "published" and r["mode"] == "score"
                 and r["batch_size"] == "32" and r["cost_per_million"]]
    published.sort(key=lambda r: (r["network"], float(r["cost_per_million"])))
    currency = rows[0]["currency"] if rows else ""
    header = "  ".join(title.ljust(width) for title, _, width in TABLE)
    lines = [header, "-" * len(header)]
    years = sorted({r["result_date"][:4] for r in published if r["result_date"]})
    sections = (("Measured here (newest night first):", measured),
                (f"Published figures ({', '.join(years) or 'undated'}), for comparison: old hardware at "
                 "old prices (best_value.csv says which rows are ranked, and why not):", published))
    for title, group in sections:
        lines.append(title)
        for row in group:
            cells = (clip(cell(row, column, currency), width).ljust(width) for _, column, width in TABLE)
            lines.append("  ".join(cells))
        if not group and group is measured:
            lines.append("(no measured row: see the nightly log)")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` with an ellipsis, so a cut cell says it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def ranking(python: str, env: dict[str, str]) -> str:
    """What ``gpucompare rank --network alexnet`` prints: the demo's answer, as a user gets it."""
    done = subprocess.run([python, "-m", "gpucompare", "rank", "--network", "alexnet"], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"(gpucompare rank failed: {done.stderr.strip()})"
    return done.stdout.rstrip()


def lake_summary(lake: str) -> str:
    """How many measured results the lake holds, from how many runs, and that none is doubled."""
    import pyarrow.compute as pc

    from gpucompare.lake.tables import open_lake

    table = open_lake(lake).results_table()
    measured = table.filter(pc.not_equal(table["target"], "published"))
    keys = {(run, config) for run, config in zip(measured["run_id"].to_pylist(),
                                                 measured["config_id"].to_pylist(), strict=True)}
    runs = len(set(measured["dag_run_id"].to_pylist()))
    doubled = measured.num_rows - len(keys)
    published = table.num_rows - measured.num_rows
    return (f"lake {lake}: {measured.num_rows} measured results from {runs} nightly run(s), "
            f"{published} published figures, {doubled} duplicates")


def main() -> int:
    started = time.monotonic()
    env = environment()
    os.environ.update({k: v for k, v in env.items() if k.startswith("GPUCOMPARE_")})
    home = Path(env["AIRFLOW_HOME"])
    log_dir = home / "demo-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    airflow = str(VENV_BIN / "airflow")
    python = sys.executable

    sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "plugins")]
    from gpucompare import settings
    from gpucompare.config import fleet

    fleet_config = fleet.load_fleet()
    pool = settings.pool()
    print(f"gpucompare demo: Airflow home {home}, lake {settings.lake_uri()}, "
          f"targets: {', '.join(t.name for t in fleet_config.enabled_targets())}")
    try:
        run_step("migrate-db", [airflow, "db", "migrate"], env, log_dir)
        run_step("create-pool", [airflow, "pools", "set", pool, str(fleet_config.max_instances),
                                 "gpucompare: targets working at once", "--include-deferred"], env, log_dir)
        run_step("nightly", [airflow, "dags", "test", "gpucompare_nightly"], env, log_dir)
        run_step("import-published", [python, "-m", "gpucompare", "import-published"], env, log_dir)
        run_step("import-catalogs", [python, "-m", "gpucompare", "import-catalog", "--shipped"], env, log_dir)
        run_step("declare-price", [python, "-m", "gpucompare", "add-price", *DEMO_PRICE], env, log_dir)
        run_step("reports", [airflow, "dags", "test", "gpucompare_reports"], env, log_dir)
    except DemoError as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 1

    latest = Path(settings.reports_uri()) / "latest"
    print(f"\nCost per million images ({latest / 'cost_per_million.csv'}):\n")
    print(cost_table(latest / "cost_per_million.csv"))
    print("\nThis machine's cost uses a declared price, not a provider's: "
          f"{' '.join(DEMO_PRICE[-1:])} (25 EUR per month / 730 h; price_source 'declared' in every report).")
    print(f"\n{lake_summary(settings.lake_uri())}")
    print(f"Report: {latest / 'index.html'}")
    print("\nThe answer, `gpucompare rank --network alexnet` (every network: no --network; --json):\n")
    print(ranking(python, env))
    print("\nRead it as: this CPU, ranked at a demo price, beside GPU figures published in 2017 that are"
          "\nshown but not ranked (too old, or flagged). Your own machines and prices: docs/install.md.")
    print(f"Done in {time.monotonic() - started:.0f} s (logs in {log_dir}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
