"""What Airflow learns about gpucompare from its ``apache_airflow_provider`` entry point.

Airflow's ProvidersManager calls :func:`get_provider_info` for every installed distribution
that registers the entry point. The ``config`` part declares the ``[gpucompare]`` section
with every setting, its type, description, allowed values and default, generated from the
typed model ``settings.Settings``: so ``airflow config list`` shows them, and
``AIRFLOW__GPUCOMPARE__<NAME>`` or ``airflow.cfg`` set them. The UI plugin is registered
through the ``airflow.plugins`` entry point (pyproject.toml), not here, so it loads once.

Kept free of Airflow imports: Airflow imports this module while it is still configuring.
"""

from __future__ import annotations

from typing import Any

from gpucompare import __version__, settings
from gpucompare.airflow.notices import silence_dependency_notices

PACKAGE_NAME = "gpucompare"
SECTION = "gpucompare"


def _option(name: str) -> dict[str, Any]:
    default = settings.default_text(name)
    # `airflow config list` hides values unless --show-values: the default is in the description too
    shown = f"Default: {default}." if default else "Default: empty."
    return {
        "description": f"{settings.description(name)} Allowed: {settings.allowed(name)}. {shown} "
                       f"(environment: {settings.env_name(name)}, which wins over this option)",
        "version_added": None,
        "type": settings.option_type(name),
        "example": None,
        # Airflow expands {AIRFLOW_HOME} in defaults, as settings.expand_home() does without Airflow.
        "default": settings.default_text(name),
    }


def config_section() -> dict[str, Any]:
    """The ``[gpucompare]`` section: one option per field of ``settings.Settings``, in its order."""
    return {
        SECTION: {
            "description": "gpucompare: where the lake, the reports and the fleet file are, and how "
                           "the DAGs run. Each option is also read from GPUCOMPARE_<OPTION>.",
            "options": {name: _option(name) for name in settings.NAMES},
        }
    }


def get_provider_info() -> dict[str, Any]:
    """The provider metadata (Airflow's runtime ``provider_info.schema.json``). Airflow calls it in
    every process while it configures itself, so it also silences our dependencies' known notices
    there (``airflow.notices``: by exact text)."""
    silence_dependency_notices()
    return {
        "package-name": PACKAGE_NAME,
        "name": "gpucompare",
        "description": "GPU benchmark DAGs: MXNet throughput and cost per million images across "
                       "cloud and rented GPU machines.",
        "versions": [__version__],
        "config": config_section(),
    }
