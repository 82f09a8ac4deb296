-- Staging, step 1 of 2, the general form of newest_by_config.sql (used when some rows without a
-- series_key have no config_id either): each series' newest date partition, grouped by the full
-- key, methodology included. Slower (9 key columns read instead of 3), same answer.
SELECT CAST(hash({{machine_key}}, mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind,
                 kvstore, methodology) >> 1 AS BIGINT) AS "key",
       max(CAST("date" AS DATE)) AS newest_date, count(*) AS results
FROM results
GROUP BY "key"
