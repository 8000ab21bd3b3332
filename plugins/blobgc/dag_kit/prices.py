"""What storage costs: Variable blobgc_storage_prices, checked, and its copy in blobgc.storage_price.

The receipts, the reclaim page's dollar chart and blobgc.reclaim_savings_daily_by_collection price the bytes
blobgc deletes from blobgc.storage_price; each DAG's report step copies the Variable there
(`sync_storage_prices`), so readers outside Airflow (a BI tool, the view) need no Variable.
"""

from __future__ import annotations

import math

import psycopg

from blobgc.core import queries
from blobgc.core.settings import ConfigurationError
from blobgc.core.sizes import S3_STANDARD_USD_PER_GB_MONTH
from blobgc.dag_kit.variables import variable

PRICES_VARIABLE = "blobgc_storage_prices"
DEFAULT_PRICES = {"STANDARD": S3_STANDARD_USD_PER_GB_MONTH}


def check_storage_prices(prices: object) -> dict[str, float]:
    """A JSON object of storage class -> USD per GB-month, each a finite number >= 0; ConfigurationError naming
    the Variable and the entry otherwise."""
    expected = (
        f"Variable {PRICES_VARIABLE} must be a JSON object of storage class -> USD per GB-month, e.g. "
        '{"STANDARD": 0.023}'
    )
    if not isinstance(prices, dict):
        raise ConfigurationError(f"{expected}; got {type(prices).__name__}")
    checked: dict[str, float] = {}
    for storage_class, price in prices.items():
        if not isinstance(storage_class, str) or not storage_class.strip():
            raise ConfigurationError(f"{expected}; got an empty storage class name")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price):
            raise ConfigurationError(
                f"Variable {PRICES_VARIABLE}: entry {storage_class!r} must be a number of "
                f"USD per GB-month, got {price!r}"
            )
        if price < 0:
            raise ConfigurationError(
                f"Variable {PRICES_VARIABLE}: entry {storage_class!r} must not be negative, got {price!r}"
            )
        checked[storage_class] = float(price)
    return checked


def storage_prices() -> dict[str, float]:
    """Variable blobgc_storage_prices (default `{"STANDARD": 0.023}`), checked. Read inside tasks only."""
    return check_storage_prices(variable(PRICES_VARIABLE, dict(DEFAULT_PRICES), json_value=True))


def sync_storage_prices(conn: psycopg.Connection, prices: dict[str, float] | None = None) -> dict[str, float]:
    """Upsert the Variable's prices (or `prices`) into blobgc.storage_price in one transaction; returns them."""
    prices = storage_prices() if prices is None else check_storage_prices(prices)
    with conn.transaction():
        conn.cursor().executemany(
            queries.load("report/upsert_storage_price"),
            [{"storage_class": c, "usd_per_gb_month": p} for c, p in sorted(prices.items())],
        )
    return prices
