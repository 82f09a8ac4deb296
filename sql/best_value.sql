-- Report best_value: per network, mode and methodology, the machines ranked by cost per million
-- images. Each methodology (official | robust | custom) is a ranking of its own: a figure is
-- never ranked against, nor on the Pareto front of, a figure timed another way.
-- Input: the cost_per_million report. Parameters: $published_cutoff (DATE: published
-- figures dated before it are old), $rank_old_published, $rank_flagged (BOOLEAN).
-- Each machine (provider, instance_type, region, market), per methodology, is represented by its cheapest
-- priced configuration (batch size, dtype, GPU count) that may be ranked, else by its
-- cheapest one; rows without a price are left out here and listed by cost_per_million
-- (price_source 'missing').
-- Shown but not ranked (rank empty, ranked false, not_ranked_reason says why):
--   'flagged'       the figure carries flags (the published import's suspicions), unless
--                   $rank_flagged;
--   'old_published' a published figure dated before $published_cutoff, unless
--                   $rank_old_published.
-- Verdicts (reports/verdicts.py, after this query): verdict (best | dearer | equivalent |
-- undetermined), cost_ratio with its 95 % interval (cost_ratio_low/high) and settle_with, each ranked
-- row against the cheapest ranked row of its network, mode and methodology (rank 1), within the
-- practical margin (GPUCOMPARE_PRACTICAL_MARGIN). The interval columns come from cost_per_million.
-- on_pareto_front (ranked rows only): no other ranked machine of the same network, mode and
-- methodology is at most as expensive per hour and at least as fast, and strictly better in one of the two.
WITH priced AS (
    SELECT *,
        CASE
            WHEN NOT $rank_flagged AND len(flags) > 0 THEN 'flagged'
            WHEN NOT $rank_old_published AND origin = 'published' AND result_date < $published_cutoff
                THEN 'old_published'
        END AS not_ranked_reason
    FROM cost_per_million WHERE cost_per_million IS NOT NULL
),
best AS (
    SELECT *, not_ranked_reason IS NULL AS ranked FROM priced
    QUALIFY row_number() OVER (
        PARTITION BY network, mode, methodology, provider, instance_type, region, market
        ORDER BY not_ranked_reason IS NULL DESC, cost_per_million, images_per_sec DESC, batch_size,
                 dtype, gpu_count
    ) = 1
)
SELECT
    network, mode, methodology,
    CASE WHEN ranked THEN rank() OVER (PARTITION BY network, mode, methodology, ranked ORDER BY cost_per_million)
    END AS rank,
    ranked, not_ranked_reason,
    provider, instance_type, region, market, gpu_model, worker_runtime, device_kind, gpu_count, num_nodes,
    dtype, batch_size, images_per_sec, images_per_sec_low, images_per_sec_high, price_per_hour,
    price_per_hour_low, price_per_hour_high, cost_per_million, cost_per_million_low, cost_per_million_high,
    interval_covers, interval_reason, interval_parts, interval_df, noise_basis, noise_cv, samples, nights,
    currency, epochs90_hours, epochs90_cost,
    ranked AND NOT EXISTS (
        SELECT 1 FROM best AS other
        WHERE other.ranked AND other.network = b.network AND other.mode = b.mode
          AND other.methodology = b.methodology
          AND other.price_per_hour <= b.price_per_hour
          AND other.images_per_sec >= b.images_per_sec
          AND (other.price_per_hour < b.price_per_hour OR other.images_per_sec > b.images_per_sec)
    ) AS on_pareto_front,
    origin, result_date, measured_at, price_effective_from, price_source, price_note, result_source, target,
    flags, joules_per_image, kwh_per_million, gco2e_per_million, sample_key
FROM best AS b
ORDER BY network, mode, methodology, ranked DESC, cost_per_million, provider, instance_type, region,
         market
