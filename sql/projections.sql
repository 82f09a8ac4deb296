-- Report projections: what a measured result would cost on every other machine with the same GPUs.
-- Input: latest (latest_results.sql), prices (schema.PRICES_SCHEMA: the shipped and imported price
-- lists and provider catalogs), fx (schema.FX_SCHEMA), gpu_canonical (gpu_model, canonical): every
-- GPU name found in latest and prices resolved through the GPU model table (config.gpus.canonical;
-- canonical NULL = a GPU the table does not know: nothing is projected from or onto it).
-- Parameters: $currency (EUR | USD), $epoch_images (1,281,167, as cost_per_million),
-- $report_date (DATE: prices and exchange rates are the latest valid on it), $gpu_only_note (the
-- text a catalog import adds to the source of a price that covers the GPUs alone, e.g. GCP's
-- attachable GPUs: such rows say price_covers = 'gpus_only', a lower bound, the host VM extra).
--
-- Projected from: the ok results measured by gpucompare (origin measured; published figures are
-- not projected) on GPUs whose GPU model the table knows, run on num_nodes nodes of
-- gpu_count / num_nodes GPUs each; of each measured instance type (any region or market: the same
-- hardware) and network, mode, dtype, GPU count and node count, the fastest result only (its batch
-- size): the other batch sizes cost more per million on every price, so they add rows, not answers.
-- Each methodology (official | robust | custom) is projected on its own, as in every other report.
-- Projected onto: every price series (provider, instance_type, region, market) of the same
-- canonical GPU model with EXACTLY as many GPUs per instance as the measured run used per node.
-- Throughput is the measurement's, unscaled. An instance with more (or fewer) GPUs is not
-- projected: how MXNet scales to another GPU count is not measured, so it is not guessed.
-- A run over num_nodes nodes is priced as num_nodes instances (as in cost_per_million).
-- The measured machine's own price series (same provider and instance type) is projected too and
-- marked measured_machine, so the page can show it among the others.
-- Price: each series' latest effective_from <= $report_date (today's catalogs, not the price on the
-- measurement's date); currency: the latest rate <= $report_date, direct or inverse; no rate: empty
-- money columns and price_source 'missing_fx'. Price rows without gpu_count are not projected onto.
-- Every row: basis = 'projected', the measured result (run_id, config_id, measured_* machine,
-- result_date, measured_at) and the price (price_effective_from, price_source; a declared price shows
-- price_source 'declared' and its label in price_note, as in cost_per_million).
WITH measured AS (
    SELECT
        l.provider AS measured_provider, l.instance_type AS measured_instance_type,
        l.region AS measured_region, l.market AS measured_market, l.gpu_model AS measured_gpu_model,
        g.canonical AS canonical_model, l.gpu_count // l.num_nodes AS gpus_per_node,
        l.network, l.mode, l.dtype, l.batch_size, l.device_kind, l.gpu_count, l.num_nodes,
        l.methodology, l.images_per_sec, l.run_id, l.config_id, l.result_source, l.target, l.result_date,
        l.measured_at, l.flags
    FROM latest AS l
    JOIN gpu_canonical AS g ON g.gpu_model = l.gpu_model
    WHERE l.status = 'ok' AND l.images_per_sec > 0 AND l.origin = 'measured' AND l.device_kind = 'gpu'
      AND g.canonical IS NOT NULL AND l.num_nodes >= 1 AND l.gpu_count % l.num_nodes = 0
    -- per measured instance type and (network, mode, dtype, GPUs, nodes): its fastest configuration
    -- (batch size, kvstore) only; the others cost more per million on any price, so projecting them
    -- would multiply the rows (results x price series) with dominated figures
    QUALIFY row_number() OVER (
        PARTITION BY l.provider, l.instance_type, l.network, l.mode, l.dtype, l.gpu_count, l.num_nodes,
                     l.methodology
        ORDER BY l.images_per_sec DESC, l.measured_at DESC, l.batch_size, l.region NULLS FIRST, l.market
    ) = 1
),
catalog AS (
    -- each price series' latest price on the report date
    SELECT
        {{machine_key p.}}, g.canonical AS canonical_model, p.gpu_count,
        p.price * CASE p.unit WHEN 'hour' THEN 1 WHEN 'minute' THEN 60 WHEN 'second' THEN 3600 END
            AS price_per_instance_hour,
        p.currency AS price_currency, p.source AS price_source, p.effective_from AS price_effective_from
    FROM prices AS p
    JOIN gpu_canonical AS g ON g.gpu_model = p.gpu_model
    WHERE g.canonical IS NOT NULL AND p.gpu_count IS NOT NULL AND p.effective_from <= $report_date
    QUALIFY row_number() OVER (
        PARTITION BY p.provider, p.instance_type, coalesce(p.region, ''), p.market, p.gpu_count
        ORDER BY p.effective_from DESC, p.source
    ) = 1
),
fx_on_report_date AS (
    -- per currency pair, the latest rate on the report date (fx_both_ways: each rate both ways)
    SELECT * FROM fx_both_ways
    WHERE effective_from <= $report_date
    QUALIFY row_number() OVER (PARTITION BY from_currency, to_currency ORDER BY effective_from DESC, inverse) = 1
),
projected AS (
    SELECT
        m.*, {{machine_key c.}}, c.price_per_instance_hour, c.price_currency,
        c.price_source, c.price_effective_from,
        CASE WHEN c.price_currency = $currency THEN 1.0 ELSE f.rate END AS fx_rate
    FROM measured AS m
    JOIN catalog AS c ON c.canonical_model = m.canonical_model AND c.gpu_count = m.gpus_per_node
    LEFT JOIN fx_on_report_date AS f ON f.from_currency = c.price_currency AND f.to_currency = $currency
),
money AS (
    SELECT *,
        price_per_instance_hour * num_nodes * fx_rate AS money_per_hour,
        1e6 / images_per_sec AS secs_per_million,
        CASE WHEN mode = 'train' THEN $epoch_images / images_per_sec END AS secs_per_epoch
    FROM projected
)
SELECT
    network, mode, dtype, batch_size, methodology,
    canonical_model AS gpu_model, device_kind, gpu_count, num_nodes,
    {{machine_key}},
    images_per_sec,
    secs_per_million AS seconds_per_million,
    money_per_hour AS price_per_hour,
    money_per_hour * secs_per_million / 3600 AS cost_per_million,
    $currency AS currency,
    secs_per_epoch AS epoch_seconds,
    money_per_hour * secs_per_epoch / 3600 AS epoch_cost,
    90 * secs_per_epoch AS epochs90_seconds,
    90 * secs_per_epoch / 3600 AS epochs90_hours,
    money_per_hour * 90 * secs_per_epoch / 3600 AS epochs90_cost,
    'projected' AS basis,
    provider = measured_provider AND instance_type = measured_instance_type AS measured_machine,
    measured_provider, measured_instance_type, measured_region, measured_market, measured_gpu_model,
    run_id, config_id, result_source, target, result_date, measured_at, flags,
    CASE WHEN fx_rate IS NULL THEN 'missing_fx' ELSE shown_price_source(price_source) END AS price_source,
    CASE WHEN fx_rate IS NOT NULL THEN declared_price_note(price_source) END AS price_note,
    CASE WHEN contains(price_source, $gpu_only_note) THEN 'gpus_only' ELSE 'instance' END AS price_covers,
    price_effective_from, price_currency, fx_rate
FROM money
ORDER BY network, mode, methodology, cost_per_million NULLS LAST, provider, instance_type, region NULLS FIRST, market,
         measured_provider, measured_instance_type, measured_region NULLS FIRST, measured_market,
         gpu_count, batch_size, dtype
