-- Staging, step 1 of 2 (not a report): the newest date partition of every machine and
-- configuration, and how many results the lake holds. Reads only the key columns (the
-- `date` partition comes from the file path, for free): one linear hash aggregation.
-- machine = provider, instance_type, region, market
-- configuration = mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind, kvstore
SELECT newest_date, sum(results) AS results
FROM (
    SELECT
        max(CAST("date" AS DATE)) AS newest_date,
        count(*) AS results
    FROM results
    GROUP BY provider, instance_type, region, market, mode, network, dtype, batch_size,
             gpu_count, num_nodes, device_kind, kvstore
)
GROUP BY newest_date
ORDER BY newest_date
