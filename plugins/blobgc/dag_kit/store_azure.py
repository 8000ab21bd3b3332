"""The Azure Blob Storage store of a `wasb` connection, built through the Azure provider's WasbHook."""

from __future__ import annotations

from blobgc.core.stores.azure import AzureStore


def azure_store(conn_id: str) -> AzureStore:
    """An `AzureStore` on `WasbHook(wasb_conn_id=conn_id).get_conn()`; the connection's extra may say `versioning`
    (true/false: the account's blob versioning, which the data plane cannot read) and `noncurrent_version_days` (the
    account's lifecycle rule deleting previous versions), see `blobgc.core.stores.azure`."""
    from airflow.providers.microsoft.azure.hooks.wasb import WasbHook

    hook = WasbHook(wasb_conn_id=conn_id)
    extra = hook.get_connection(conn_id).extra_dejson or {}
    versioning = extra.get("versioning")
    days = extra.get("noncurrent_version_days")
    return AzureStore(
        hook.get_conn(),
        versioning=None if versioning is None else str(versioning).lower() in ("true", "1", "yes", "enabled"),
        noncurrent_days=None if days is None else int(days),
    )
