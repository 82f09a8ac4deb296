-- Staging, step 1 of 2 (not a report): the newest date partition of every machine and
-- configuration, and how many results the lake holds. Reads only key columns (the `date`
-- partition comes from the file path, for free): one linear hash aggregation.
-- machine = provider, instance_type, region, market
-- configuration = mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind, kvstore
-- and methodology (official | robust | custom; null, from records before it existed = official):
-- figures of two methodologies are two series, each with its own latest result. Grouped here by
-- the raw column (null and official apart): finer than needed, so still a superset of the
-- partitions step 2 needs, and cheaper than resolving null per row.
-- Grouped by the record's config_id (the worker's stable id of the cell: mode, network,
-- dtype, batch, devices, kvstore, scaling; the published import builds one too) with
-- num_nodes: at least as fine as the configuration, so the partitions found are a superset
-- of those step 2 needs, and 3 columns are read where the full key takes 9. `unkeyed`
-- counts rows without a config_id; if there are any, latest_dates_by_key.sql is used instead.
SELECT newest_date, sum(results) AS results, sum(unkeyed) AS unkeyed
FROM (
    SELECT
        max(CAST("date" AS DATE)) AS newest_date,
        count(*) AS results,
        count(*) FILTER (WHERE config_id IS NULL) AS unkeyed
    FROM results
    -- one 64-bit hash of the group's columns: a group-by on one integer costs less than on seven
    -- columns (text most of them); two series share a group only if their hashes collide (about 1
    -- in 10^11 for 12,000 series), and then only the older one's partition could be missed
    GROUP BY hash({{machine_key}}, num_nodes, config_id, methodology)
)
GROUP BY newest_date
ORDER BY newest_date
