-- Set one storage class's USD per GB-month, from Variable blobgc_storage_prices.
INSERT INTO blobgc.storage_price (storage_class, usd_per_gb_month, updated_at)
VALUES (%(storage_class)s, %(usd_per_gb_month)s, now())
ON CONFLICT (storage_class) DO UPDATE
SET usd_per_gb_month = EXCLUDED.usd_per_gb_month, updated_at = EXCLUDED.updated_at
WHERE blobgc.storage_price.usd_per_gb_month IS DISTINCT FROM EXCLUDED.usd_per_gb_month;
