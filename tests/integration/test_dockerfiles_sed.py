"""The ``sed`` that drops the test tools from the Airflow image, run on the real requirements.txt
(split from tests/unit/test_dockerfiles.py, which checks the Dockerfiles' instructions).
"""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO_ROOT
from tests.support.dockerfiles import AIRFLOW, final_stage


def test_airflow_image_leaves_the_test_tools_out() -> None:
    command = next(a for k, a in final_stage(AIRFLOW) if k == "RUN" and "sed " in a)
    sed_expression = re.search(r"sed '([^']+)'", command).group(1)
    runtime = subprocess.run(["sed", sed_expression, str(REPO_ROOT / "requirements.txt")],
                             capture_output=True, text=True, check=True).stdout
    names = {re.split(r"[=<>\[ ]", line)[0].lower() for line in runtime.splitlines()
             if line and not line.startswith("#")}
    assert {"apache-airflow", "apache-airflow-providers-ssh", "apache-airflow-providers-amazon",
            "pyarrow", "duckdb"} <= names
    assert not names & {"pytest", "moto", "ruff", "playwright", "pytest-timeout"}
