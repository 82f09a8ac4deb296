-- Staging for the statistics (reports/uncertainty.py, reports/evidence.py), used with --nights N > 1
-- (not a report). Input: latest (latest_results.sql, with sample_key), pooled (every results file).
-- Parameter: $nights.
-- Per row of latest that ran ok: one row per night among the last $nights runs of the same
-- configuration on the same machine and methodology that ran ok (by finished_at; the latest result
-- is the first of them): that night's figure (images_per_sec: the median of its repeats), its
-- repeats and its date. The night is the unit of the interval over nights: the repeats only
-- floor its noise. Published figures carry no runs and are left out.
WITH runs AS (
    SELECT
        l.sample_key, p.images_per_sec AS figure, coalesce(p.images_per_sec_samples, []) AS samples,
        CAST(p."date" AS DATE) AS night,
        row_number() OVER (PARTITION BY l.sample_key ORDER BY p.finished_at DESC NULLS LAST) AS age
    FROM latest AS l
    JOIN pooled AS p
      ON p.provider IS NOT DISTINCT FROM l.provider
     AND p.instance_type IS NOT DISTINCT FROM l.instance_type
     AND p.region IS NOT DISTINCT FROM l.region
     AND p.market IS NOT DISTINCT FROM l.market
     AND p.mode = l.mode AND p.network = l.network AND p.dtype = l.dtype AND p.batch_size = l.batch_size
     AND p.gpu_count = l.gpu_count AND p.num_nodes = l.num_nodes
     AND p.device_kind IS NOT DISTINCT FROM l.device_kind
     AND p.kvstore IS NOT DISTINCT FROM l.kvstore
     AND coalesce(p.methodology, 'official') = l.methodology
    WHERE l.status = 'ok' AND p.status = 'ok' AND p.target IS DISTINCT FROM 'published'
      AND p.images_per_sec > 0
)
SELECT sample_key, figure, samples, night
FROM runs
WHERE age <= $nights
ORDER BY sample_key, age
