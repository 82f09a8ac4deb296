"""What Airflow learns about gpucompare from its ``apache_airflow_provider`` entry point.

Airflow's ProvidersManager calls :func:`get_provider_info` for every installed distribution
that registers the entry point. The ``config`` part declares the ``[gpucompare]`` section
with every setting, its description and its default, generated from ``settings.DEFAULTS``
and ``settings.DESCRIPTIONS``: so ``airflow config list`` shows them, and
``AIRFLOW__GPUCOMPARE__<NAME>`` or ``airflow.cfg`` set them. The UI plugin is registered
through the ``airflow.plugins`` entry point (pyproject.toml), not here, so it loads once.

Kept free of Airflow imports: Airflow imports this module while it is still configuring.
"""

from __future__ import annotations

from typing import Any

from gpucompare import __version__, settings

PACKAGE_NAME = "gpucompare"
SECTION = "gpucompare"


def _option(name: str) -> dict[str, Any]:
    default = settings.DEFAULTS[name]
    # Airflow calls this while it configures itself, so a setting added without its description
    # must not break Airflow: it gets a placeholder here, and tests/unit/test_packaging.py fails.
    description = settings.DESCRIPTIONS.get(name) or f"gpucompare setting {name} (no description yet)."
    # `airflow config list` hides values unless --show-values: the default is in the description too
    shown = f"Default: {default}." if default else "Default: empty."
    return {
        "description": f"{description} {shown} (environment: GPUCOMPARE_{name.upper()}, which wins over "
                       "this option)",
        "version_added": None,
        "type": "integer" if default.isdigit() else "string",
        "example": None,
        # Airflow expands {AIRFLOW_HOME} in defaults, as settings.setting() does without Airflow.
        "default": default,
    }


def config_section() -> dict[str, Any]:
    """The ``[gpucompare]`` section: one option per setting, in the order of ``settings.DEFAULTS``."""
    return {
        SECTION: {
            "description": "gpucompare: where the lake, the reports and the fleet file are, and how "
                           "the DAGs run. Each option is also read from GPUCOMPARE_<OPTION>.",
            "options": {name: _option(name) for name in settings.DEFAULTS},
        }
    }


def get_provider_info() -> dict[str, Any]:
    """The provider metadata (Airflow's runtime ``provider_info.schema.json``)."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "gpucompare",
        "description": "GPU benchmark DAGs: MXNet throughput and cost per million images across "
                       "cloud and rented GPU machines.",
        "versions": [__version__],
        "config": config_section(),
    }
