"""The GCS store of a `google_cloud_platform` connection, built through the Google provider's GCSHook."""

from __future__ import annotations

from blobgc.core.stores.gcs import GcsStore


def gcs_store(conn_id: str) -> GcsStore:
    """A `GcsStore` on the client of `conn_id`: the hook's credentials and project (anonymous when the extra says
    `is_anonymous`), and the extra's `endpoint_url`, when set, as the JSON API's endpoint (batches included)."""
    from airflow.providers.google.cloud.hooks.gcs import GCSHook
    from airflow.providers.google.common.consts import CLIENT_INFO
    from google.cloud import storage

    hook = GCSHook(gcp_conn_id=conn_id)
    credentials, project = hook.get_credentials_and_project_id()
    endpoint = hook.extras.get("endpoint_url") or hook.extras.get("extra__google_cloud_platform__endpoint_url")
    options = hook.get_client_options(api_endpoint_override=str(endpoint).rstrip("/")) if endpoint else None
    client = storage.Client(
        project=project or hook.extras.get("project"),
        credentials=credentials,
        client_info=CLIENT_INFO,
        client_options=options,
    )
    return GcsStore(client)
