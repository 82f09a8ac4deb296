-- Staging, step 1 of 2, the general form of latest_dates.sql (used when some results have
-- no config_id): the newest date partition of every machine and configuration, grouped by
-- the full key, methodology included. Slower (9 key columns read instead of 3), same answer.
SELECT newest_date, sum(results) AS results, 0 AS unkeyed
FROM (
    SELECT max(CAST("date" AS DATE)) AS newest_date, count(*) AS results
    FROM results
    GROUP BY {{machine_key}}, mode, network, dtype, batch_size,
             gpu_count, num_nodes, device_kind, kvstore, methodology
)
GROUP BY newest_date
ORDER BY newest_date
