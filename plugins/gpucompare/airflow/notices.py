"""Notices of our dependencies that every ``airflow`` process would print, silenced by exact text.

Starlette 1.2.0 and later warn on import of ``starlette.testclient`` when ``httpx2`` is not
installed ("Using `httpx` with `starlette.testclient` is deprecated; install `httpx2` instead.",
a ``StarletteDeprecationWarning``, a ``UserWarning``). Airflow's execution API imports
``svcs.fastapi``, which imports ``fastapi.testclient`` for a type annotation only (Airflow's
in-process API client is its own ``httpx.WSGITransport``, not Starlette's test client), so
``airflow dags test``, the dag processor, the triggerer and the API server each print it. It is
silenced here rather than at the source because the source fixes cost more than the notice:
a ``starlette<1.2`` constraint is allowed by apache-airflow-core (``starlette>=1.0.1``) and
fastapi (``>=0.46.0``) but gives up the security fixes of starlette 1.3.1 (form parser limits,
GHSA-82w8-qh3p-5jfq), and ``httpx2`` would add three packages (httpx2, httpcore2, truststore)
that nothing of ours or Airflow's runtime uses. See docs/install.md ("Known notices").

The filter matches the whole message text, nothing wider: any other Starlette warning still shows.
:func:`silence_dependency_notices` runs from the provider entry point (``provider_info``, which
Airflow imports in every process while it configures itself) and from the ``gpucompare`` command.
Standard library only: Airflow imports the provider entry point before it is configured.
"""

from __future__ import annotations

import re
import warnings

#: (exact message, warning class it derives from): each silenced only with this very text
DEPENDENCY_NOTICES: tuple[tuple[str, type[Warning]], ...] = (
    ("Using `httpx` with `starlette.testclient` is deprecated; install `httpx2` instead.", UserWarning),
)


def silence_dependency_notices() -> None:
    """Add an ``ignore`` filter per notice, matching its full text (idempotent: warnings dedupes)."""
    for text, category in DEPENDENCY_NOTICES:
        warnings.filterwarnings("ignore", message=re.escape(text) + r"\Z", category=category)
