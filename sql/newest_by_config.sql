-- Staging, step 1 of 2, for rows without a series_key (written before it existed): each
-- series' newest date partition and its number of results, grouped by the record's config_id
-- (the worker's stable id of the cell: mode, network, dtype, batch, devices, kvstore, scaling;
-- the published import builds one too) with the machine, num_nodes and methodology: at least as
-- fine as the configuration, so the partitions found are a superset of those step 2 needs, and
-- 3 columns are read where the full key takes 9. Grouped by the raw methodology (null and
-- official apart): finer than needed, still a superset, and cheaper than resolving null per row.
-- The group is one 64-bit hash of its columns (a group-by on one integer costs less than on
-- seven columns); two series share a group only if their hashes collide (about 1 in 10^11 for
-- 12,000 series), and then only the older one's partition could be missed.
-- `unkeyed` counts rows without a config_id; if there are any, newest_by_key.sql is used instead.
-- (shifted right one bit to fit a signed BIGINT, the type of series_key: 63 bits of the hash)
SELECT CAST(hash({{machine_key}}, num_nodes, config_id, methodology) >> 1 AS BIGINT) AS "key",
       max(CAST("date" AS DATE)) AS newest_date, count(*) AS results,
       count(*) FILTER (WHERE config_id IS NULL) AS unkeyed
FROM results
GROUP BY "key"
