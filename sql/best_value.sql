-- Report best_value: per network and mode, the machines ranked by cost per million images.
-- Input: the cost_per_million report. Each machine (provider, instance_type, region, market)
-- is represented by its cheapest priced configuration (batch size, dtype, GPU count); rows
-- without a price are left out here and listed by cost_per_million (price_source 'missing').
-- on_pareto_front: no other machine of the same network and mode is at most as expensive per
-- hour and at least as fast, and strictly better in one of the two.
WITH priced AS (
    SELECT * FROM cost_per_million WHERE cost_per_million IS NOT NULL
),
best AS (
    SELECT * FROM priced
    QUALIFY row_number() OVER (
        PARTITION BY network, mode, provider, instance_type, region, market
        ORDER BY cost_per_million, images_per_sec DESC, batch_size, dtype, gpu_count
    ) = 1
)
SELECT
    network, mode,
    rank() OVER (PARTITION BY network, mode ORDER BY cost_per_million) AS rank,
    provider, instance_type, region, market, gpu_model, gpu_count, num_nodes, dtype, batch_size,
    images_per_sec, price_per_hour, cost_per_million, currency, epochs90_hours, epochs90_cost,
    NOT EXISTS (
        SELECT 1 FROM best AS other
        WHERE other.network = b.network AND other.mode = b.mode
          AND other.price_per_hour <= b.price_per_hour
          AND other.images_per_sec >= b.images_per_sec
          AND (other.price_per_hour < b.price_per_hour OR other.images_per_sec > b.images_per_sec)
    ) AS on_pareto_front,
    price_source, result_source, target, measured_at
FROM best AS b
ORDER BY network, mode, rank, provider, instance_type, region, market
