"""A price the user declares for a machine of their own: :class:`DeclaredPrice` (a fleet file's
``prices`` entry, ``gpucompare add-price``) and :class:`TargetPrice` (a target's ``price``).

Exactly one basis per price:

* ``per_hour``: the rate itself (a negotiated or reserved rate);
* ``per_month``: a monthly fee (a rented server), per hour = fee / :data:`HOURS_PER_MONTH`;
* ``purchase``: an amortised purchase (an on-premises host), per hour = price / (life in hours)
  + ``power_per_hour`` (electricity, hosting), the life given as ``life_months`` or
  ``life_years`` (a month is :data:`HOURS_PER_MONTH` hours, a year 12 months).

Every declared price carries its currency, the date it is valid from and a ``label`` saying
what it is (``"example price for this demo machine"``, ``"our rack, invoice 2026-114"``); the
reports show it as ``price_source`` ``declared`` with the label in ``price_note``
(``gpucompare.prices.declared`` turns a model into a row of the price history).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import model_validator

from gpucompare.config import patterns
from gpucompare.config.fields import Number, Predicate, Whole
from gpucompare.config.models.values import (
    Currency,
    GpuCount,
    InstanceLabel,
    Market,
    Provider,
    Region,
    Strict,
    rule,
)

#: Hours in a month when a monthly fee becomes an hourly price: 365 days × 24 h / 12 = 730,
#: the convention of the cloud providers' monthly prices (AWS, Azure, GCP).
HOURS_PER_MONTH = 730
MONTHS_PER_YEAR = 12
#: The one word that marks a declared price: the start of its source in the price history and
#: the reports' ``price_source``.
DECLARED = "declared"
BASES: tuple[str, ...] = ("per_hour", "per_month", "purchase")


def _iso_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def _label(text: str) -> bool:
    return 0 < len(text.strip()) <= 200 and text.isprintable()


IsoDate = Annotated[str, Predicate(_iso_date, "a date YYYY-MM-DD")]
Label = Annotated[str, Predicate(_label, "a label of 1 to 200 printable characters (no line breaks)")]
PositiveMoney = Annotated[float, Number(0.0001, 1e7)]


class Purchase(Strict):
    """A machine bought: its price spread over its life, plus what running it costs per hour."""

    price: PositiveMoney
    life_months: Annotated[int, Whole(1, 600)] | None = None
    life_years: Annotated[float, Number(0.1, 50.0)] | None = None
    power_per_hour: Annotated[float, Number(0.0, 1e5)] = 0.0

    @model_validator(mode="after")
    def _one_life(self) -> Purchase:
        if (self.life_months is None) == (self.life_years is None):
            raise rule("life_months", "give the machine's life once", "life_months or life_years")
        return self

    def hours(self) -> float:
        months = self.life_months if self.life_months is not None else self.life_years * MONTHS_PER_YEAR
        return months * HOURS_PER_MONTH


class TargetPrice(Strict):
    """A target's own price (``targets[i].price``): the machine is the target's."""

    per_hour: PositiveMoney | None = None
    per_month: PositiveMoney | None = None
    purchase: Purchase | None = None
    currency: Currency
    effective_from: IsoDate
    label: Label

    @model_validator(mode="before")
    @classmethod
    def _date_text(cls, data: Any) -> Any:
        """A YAML date (``2026-12-01`` unquoted) as its text."""
        if isinstance(data, Mapping) and isinstance(data.get("effective_from"), dt.date):
            return {**data, "effective_from": data["effective_from"].isoformat()}
        return data

    @model_validator(mode="after")
    def _one_basis(self) -> TargetPrice:
        given = [name for name in BASES if getattr(self, name) is not None]
        if len(given) != 1:
            raise rule("per_hour", f"{len(given)} of the bases given ({', '.join(given) or 'none'}): "
                       "give exactly one", ", ".join(BASES))
        return self

    def hourly(self) -> float:
        """The price per hour in ``currency``."""
        if self.per_hour is not None:
            return self.per_hour
        if self.per_month is not None:
            return self.per_month / HOURS_PER_MONTH
        assert self.purchase is not None
        return self.purchase.price / self.purchase.hours() + self.purchase.power_per_hour

    def basis(self) -> str:
        """How the hourly price was made, in words (part of the price's note)."""
        if self.per_hour is not None:
            return f"{self.per_hour:g} {self.currency} per hour"
        if self.per_month is not None:
            return f"{self.per_month:g} {self.currency} per month / {HOURS_PER_MONTH} h"
        bought = self.purchase
        assert bought is not None
        life = (f"{bought.life_months} months" if bought.life_months is not None
                else f"{bought.life_years:g} years")
        power = f" + {bought.power_per_hour:g} {self.currency}/h power" if bought.power_per_hour else ""
        return f"{bought.price:g} {self.currency} over {life} of {HOURS_PER_MONTH} h{power}"

    def note(self) -> str:
        """The text every report shows for the price: ``declared: <label> (<basis>)``."""
        return f"{DECLARED}: {self.label.strip()} ({self.basis()})"


class DeclaredPrice(TargetPrice):
    """A fleet file's ``prices`` entry or ``gpucompare add-price``: a machine and its price."""

    provider: Provider
    instance_type: InstanceLabel
    region: Region | None = None
    market: Market = patterns.DEFAULT_MARKET
    gpu_model: Annotated[str, Predicate(lambda v: 0 < len(v) <= 60 and v.isprintable(),
                                        "a GPU model name such as Tesla T4")] | None = None
    gpu_count: GpuCount | None = None
