-- USD per GB-month (GB = 2^30 bytes) of one storage class, as the last run's report step copied it from Variable blobgc_storage_prices.
SELECT usd_per_gb_month FROM blobgc.storage_price WHERE storage_class = %(storage_class)s;
