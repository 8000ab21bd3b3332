"""blobgc.dag_kit.prices: Variable blobgc_storage_prices, checked, and its copy in blobgc.storage_price."""
from __future__ import annotations

import json

import pytest

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.prices import DEFAULT_PRICES, storage_prices, sync_storage_prices

VAR = "AIRFLOW_VAR_BLOBGC_STORAGE_PRICES"


def test_without_the_variable_prices_are_s3_standard_list_price(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    assert storage_prices() == {"STANDARD": 0.023} == DEFAULT_PRICES


def test_the_variable_sets_prices_per_storage_class(monkeypatch):
    monkeypatch.setenv(VAR, json.dumps({"STANDARD": 0.021, "GLACIER_IR": 0.004, "FREE": 0}))
    assert storage_prices() == {"STANDARD": 0.021, "GLACIER_IR": 0.004, "FREE": 0.0}


@pytest.mark.parametrize(("raw", "names"), [
    ('{"STANDARD": 0.023', ["blobgc_storage_prices", "not valid JSON"]),
    ('[0.023]', ["blobgc_storage_prices", "JSON object"]),
    ('{"STANDARD": -0.01}', ["blobgc_storage_prices", "'STANDARD'", "negative"]),
    ('{"STANDARD": "0.023"}', ["blobgc_storage_prices", "'STANDARD'", "number"]),
    ('{"GLACIER": true}', ["blobgc_storage_prices", "'GLACIER'", "number"]),
    ('{"STANDARD": null}', ["blobgc_storage_prices", "'STANDARD'", "number"]),
])
def test_a_bad_variable_raises_naming_the_variable_and_the_entry(monkeypatch, raw, names):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ConfigurationError) as error:
        storage_prices()
    for name in names:
        assert name in str(error.value)


def test_sync_upserts_the_prices_in_one_transaction(conn, monkeypatch):
    monkeypatch.setenv(VAR, json.dumps({"STANDARD": 0.0125, "STANDARD_IA": 0.0125}))
    try:
        assert sync_storage_prices(conn) == {"STANDARD": 0.0125, "STANDARD_IA": 0.0125}
        rows = dict(conn.execute("SELECT storage_class, usd_per_gb_month::float8 FROM blobgc.storage_price").fetchall())
        assert rows == {"STANDARD": 0.0125, "STANDARD_IA": 0.0125}
        # the companion view prices reclaimed bytes at STANDARD's price
        with conn.transaction():
            conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run) VALUES ('blobgc_sweep', 'p1', false)")
            conn.execute("INSERT INTO blobgc.run_collection (dag_id, run_id, collection, objects_deleted, "
                         "bytes_reclaimed) VALUES ('blobgc_sweep', 'p1', 'app_blob', 4, %s)", (8 << 30,))
        saved = conn.execute("SELECT usd_per_month_saved::float8 FROM blobgc.reclaim_savings_daily_by_collection "
                             "WHERE dag_id = 'blobgc_sweep'").fetchone()[0]
        assert saved == pytest.approx(8 * 0.0125)

        monkeypatch.setenv(VAR, json.dumps({"STANDARD": "cheap"}))  # a bad Variable changes nothing
        with pytest.raises(ConfigurationError):
            sync_storage_prices(conn)
        assert conn.execute("SELECT usd_per_gb_month::float8 FROM blobgc.storage_price "
                            "WHERE storage_class = 'STANDARD'").fetchone()[0] == 0.0125
    finally:
        with conn.transaction():
            conn.execute("DELETE FROM blobgc.storage_price WHERE storage_class <> 'STANDARD'")
            conn.execute("UPDATE blobgc.storage_price SET usd_per_gb_month = 0.023 WHERE storage_class = 'STANDARD'")
