"""Test configuration shared by every tier.

Fixtures that start real local services live in their own modules and are registered here:
``fixtures_sshd`` (an OpenSSH server on 127.0.0.1), ``fixtures_aws`` (moto's server on
127.0.0.1 as the AWS endpoint) and ``fixtures_airflow`` (an isolated AIRFLOW_HOME).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = Path(os.environ.get("GPUCOMPARE_BENCH_PYTHON", REPO_ROOT / ".venv-bench" / "bin" / "python"))

for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

pytest_plugins = ["tests.fixtures_sshd", "tests.fixtures_aws", "tests.fixtures_airflow"]
