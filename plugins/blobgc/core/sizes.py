"""Human-readable byte counts for logs and reports, and what bytes cost to store."""

from __future__ import annotations


def human_bytes(n: int | None) -> str:
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


GIB = 1 << 30
S3_STANDARD_USD_PER_GB_MONTH = 0.023  # S3 Standard's list price (GB = 2^30 bytes, as S3 bills)
S3_COPY_USD_PER_1000 = 0.005  # S3 Standard's list price of 1,000 PUT, COPY, POST or LIST requests


def usd_per_month(n_bytes: int | None, usd_per_gb_month: float) -> float:
    """The monthly storage cost of `n_bytes` at `usd_per_gb_month`."""
    return round((n_bytes or 0) / GIB * usd_per_gb_month, 9)
