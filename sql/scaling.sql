-- Report scaling: speedup and efficiency of multi-GPU (and multi-node) runs over one GPU.
-- Input: latest (latest_results.sql), published_scaling (schema.PUBLISHED_SCALING_SCHEMA).
--
-- Every multi-GPU result is set against a 1-GPU, 1-node result of the same network, mode,
-- dtype, device kind, provider, GPU model and methodology (a robust 4-GPU figure is never set
-- against an official 1-GPU one), under both batch rules where the baseline exists:
--   strong = global batch held: the baseline ran the same batch_size on one GPU;
--   weak   = per-device batch held: the baseline ran batch_size / gpu_count on one GPU.
-- speedup = images_per_sec / baseline images_per_sec, efficiency = speedup / gpu_count.
-- Baseline preference: the same instance type, then region, then market, then the latest.
-- Each series starts with its baseline row (gpu_count 1, speedup 1).
-- Published curves (white papers) follow with origin = 'published_curve', their speedup as
-- published and no throughput or date (the white paper's curves are undated); results
-- imported from publications carry origin = 'published' and their publication date. Published
-- figures and curves count as methodology 'official' (the reference harness).
WITH ok AS (
    SELECT *, row_number() OVER () AS result_row
    FROM latest
    WHERE status = 'ok' AND images_per_sec > 0
),
multi AS (
    SELECT ok.*, rule.scaling,
        CASE rule.scaling
            WHEN 'strong' THEN batch_size
            ELSE coalesce(per_device_batch, CASE WHEN batch_size % gpu_count = 0 THEN batch_size // gpu_count END)
        END AS baseline_batch
    FROM ok CROSS JOIN (VALUES ('strong'), ('weak')) AS rule(scaling)
    WHERE ok.gpu_count > 1
),
candidates AS (
    SELECT
        m.result_row, m.scaling, b.result_row AS baseline_row,
        row_number() OVER (
            PARTITION BY m.result_row, m.scaling
            ORDER BY (b.instance_type = m.instance_type) DESC,
                     (b.region IS NOT DISTINCT FROM m.region) DESC,
                     (b.market IS NOT DISTINCT FROM m.market) DESC,
                     b.measured_at DESC NULLS LAST, b.instance_type, b.region, b.market
        ) AS preference
    FROM multi AS m
    JOIN ok AS b
      ON b.gpu_count = 1 AND b.num_nodes = 1
     AND b.provider = m.provider
     AND b.gpu_model IS NOT DISTINCT FROM m.gpu_model
     AND b.network = m.network AND b.mode = m.mode AND b.dtype IS NOT DISTINCT FROM m.dtype
     AND b.device_kind IS NOT DISTINCT FROM m.device_kind
     AND b.methodology = m.methodology
     AND b.batch_size = m.baseline_batch
),
pairs AS (
    SELECT m.*, b.images_per_sec AS baseline_images_per_sec, b.instance_type AS baseline_instance_type,
           b.result_row AS baseline_row
    FROM multi AS m
    JOIN candidates AS c ON c.result_row = m.result_row AND c.scaling = m.scaling AND c.preference = 1
    JOIN ok AS b ON b.result_row = c.baseline_row
),
series_points AS (
    SELECT
        {{machine_key}}, gpu_model, device_kind, network, mode, dtype, methodology,
        scaling, baseline_batch, batch_size,
        coalesce(per_device_batch, batch_size // gpu_count) AS per_device_batch,
        gpu_count, num_nodes, images_per_sec, baseline_images_per_sec, baseline_instance_type,
        origin, result_source, target, result_date, measured_at, flags
    FROM pairs
    UNION ALL
    -- the baseline itself, once per series that uses it
    SELECT DISTINCT
        b.provider, p.instance_type, p.region, p.market, b.gpu_model, b.device_kind, b.network, b.mode,
        b.dtype, b.methodology, p.scaling, p.baseline_batch, b.batch_size, b.batch_size, 1, 1, b.images_per_sec,
        b.images_per_sec, b.instance_type, b.origin, b.result_source, b.target, b.result_date,
        b.measured_at, b.flags
    FROM pairs AS p JOIN ok AS b ON b.result_row = p.baseline_row
)
SELECT
    origin, 'MXNet' AS framework,
    {{machine_key}}, gpu_model, device_kind, network, mode, dtype, methodology,
    scaling, baseline_batch, batch_size, per_device_batch, gpu_count, num_nodes, images_per_sec,
    baseline_images_per_sec, baseline_instance_type,
    images_per_sec / baseline_images_per_sec AS speedup,
    images_per_sec / baseline_images_per_sec / gpu_count AS efficiency,
    result_source, target, result_date, measured_at, flags
FROM series_points
UNION ALL
SELECT
    'published_curve', framework, NULL, NULL, NULL, NULL, gpu_model, 'gpu', network, 'train', NULL,
    'official', NULL, NULL, NULL, NULL, gpu_count, NULL, NULL, NULL, NULL, speedup, speedup / gpu_count, source,
    'published', NULL, NULL, CAST([] AS VARCHAR[])
FROM published_scaling
ORDER BY origin DESC, network, mode, methodology, gpu_model, provider NULLS LAST, instance_type, region,
         market, scaling, baseline_batch, gpu_count, num_nodes
