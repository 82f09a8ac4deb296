"""
### gpucompare_manual — try one machine, on demand

Trigger it with the form to benchmark a machine that is not (yet) in the fleet: a new EC2
instance type, a rented server reachable over SSH, or this host.

| param | what |
| --- | --- |
| `kind` | `ec2` (provisioned for the run, then terminated), `ssh` (a rented host), `local` |
| `provider` | `aws` for ec2, `local` for local, the renter's name for ssh (e.g. `leadergpu`) |
| `instance_type` | e.g. `p3.2xlarge`, `g5.xlarge`; a plain label for rented hosts (`ltbv14`) |
| `region` | AWS region for ec2 (e.g. `us-east-1`); optional label otherwise |
| `market` | `on_demand` or `spot` (ec2 only; falls back to on-demand if spot is refused) |
| `gpu_count` | GPUs of the machine (0 = CPU) |
| `networks`, `batch_sizes`, `modes`, `dtypes` | the sweep matrix |
| `profile` | fleet profile whose warm-up, batches, repeats and time limits are used |
| `ssh_conn_id` | Airflow SSH connection of the rented host (ssh only) |
| `budget_cap`, `budget_currency` | refuse an ec2 run estimated above it (≤ fleet `budget_ceiling`) |

Everything is validated twice before anything starts: by the trigger form (types, enums,
patterns) and by the first task, `validate_request`, which checks the rules between fields
with the same module (`gpucompare.config.validation`) and fails the run with a message naming the
field, e.g. `instance_type: 'p3.2xlarge; rm -rf /' is not valid`. Then the same per-target
task group as `gpucompare_nightly` runs (terminate as a teardown, results into the lake,
the **gpucompare_results** Asset).
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from gpucompare.airflow import pipeline
from gpucompare.config import fleet, validation

log = logging.getLogger(__name__)

_SCHEMAS = validation.param_schemas()


def _param(default: Any, title: str, description: str, name: str) -> Param:
    return Param(default, title=title, description=description, **_SCHEMAS[name])


PARAMS = {
    "kind": _param("ec2", "Target kind", "ec2 (provisioned and terminated), ssh (rented host), local",
                   "kind"),
    "provider": _param("aws", "Provider", "aws for ec2, local for local, the renter's name for ssh",
                       "provider"),
    "instance_type": _param("g5.xlarge", "Instance type",
                            "EC2 family.size (p3.2xlarge), or the renter's machine name", "instance_type"),
    "region": _param("us-east-1", "Region", "AWS region for ec2; optional for others", "region"),
    "market": _param("on_demand", "Market", "spot falls back to on-demand when refused (ec2 only)",
                     "market"),
    "gpu_count": _param(1, "GPU count", "GPUs of the machine; 0 for a CPU-only host", "gpu_count"),
    "networks": _param(["resnet-50"], "Networks", "classic MXNet networks to measure", "networks"),
    "batch_sizes": _param([1, 8, 32], "Batch sizes", "global batch sizes, each > 0", "batch_sizes"),
    "modes": _param(["score"], "Modes", "score (inference) and/or train", "modes"),
    "dtypes": _param(["float32"], "Data types", "float32 and/or float16", "dtypes"),
    "profile": _param("nightly", "Profile", "fleet profile for warm-up, batches, repeats, time limits",
                      "profile"),
    "ssh_conn_id": _param(None, "SSH connection", "Airflow SSH connection of a rented host (ssh only)",
                          "ssh_conn_id"),
    "budget_cap": _param(5.0, "Budget cap", "largest estimated cost accepted for an ec2 run",
                         "budget_cap"),
    "budget_currency": _param("USD", "Budget currency", "currency of the budget cap", "budget_currency"),
}


@task(retries=0)
def validate_request() -> list[dict[str, Any]]:
    """Check every param and the rules between them before anything is provisioned."""
    from gpucompare.prices.tables import shipped_fx_rate  # here: pyarrow stays out of the parse

    context = get_current_context()
    with pipeline.bad_input_fails():
        request = validation.check_manual_request(dict(context["params"]))
        plan = fleet.plan_manual(request, fleet.load_fleet(fx_rate=shipped_fx_rate),
                                 context["dag_run"].run_id)
        pipeline.check_plan(plan)
    log.info("Request accepted: %s %s in %s (%s)", plan["spec"]["provider"], plan["spec"]["instance_type"],
             plan["spec"]["region"] or "-", plan["spec"]["market"])
    return [plan]


@dag(
    dag_id="gpucompare_manual",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=__doc__,
    tags=["gpucompare", "benchmark", "manual"],
    default_args=pipeline.default_args(),
    params=PARAMS,
)
def gpucompare_manual() -> None:
    pipeline.run_targets(validate_request())


gpucompare_manual()
