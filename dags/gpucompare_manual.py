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

Everything is validated twice before anything starts, by one model
(`gpucompare.config.models.TriggerParams`): the form's JSON schema is generated from it (types,
enums, patterns, ranges), and the first task, `validate_request`, validates the params with it
again, then the rules between fields, and fails the run with a message naming the field, the
value and what is allowed, e.g.
`instance_type: 'p3.2xlarge; rm -rf /' is not allowed; allowed: …`. Then the same per-target
task group as `gpucompare_nightly` runs (terminate as a teardown, results into the lake,
the **gpucompare_results** Asset).
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from gpucompare.airflow import pipeline, policy
from gpucompare.config import fleet
from gpucompare.config.models import trigger

log = logging.getLogger(__name__)

#: The form: every param's default, title, description and schema from TriggerParams.
PARAMS = {name: Param(field["default"], title=field["title"], description=field["description"],
                      **field["schema"])
          for name, field in trigger.form_fields().items()}


@task(retries=0)
def validate_request() -> list[dict[str, Any]]:
    """Check every param and the rules between them before anything is provisioned."""
    from gpucompare.prices.tables import shipped_fx_rate  # here: pyarrow stays out of the parse

    context = get_current_context()
    with policy.bad_input_fails():
        request = trigger.check_request(dict(context["params"]))
        plan = fleet.plan_manual(request, fleet.load_fleet(fx_rate=shipped_fx_rate),
                                 context["dag_run"].run_id)
        pipeline.check_plan(plan)
        pipeline.hold_deployment_names([plan["spec"]])
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
    default_args=policy.default_args(),
    params=PARAMS,
)
def gpucompare_manual() -> None:
    pipeline.run_targets(validate_request())


gpucompare_manual()
