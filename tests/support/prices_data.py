"""Recorded AWS Price List answers (tests/support/data/aws_pricing), for the unit and the
integration price tests alike."""

from __future__ import annotations

import json

from tests.conftest import DATA_DIR

RECORDED = DATA_DIR / "aws_pricing"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text(encoding="utf-8"))
