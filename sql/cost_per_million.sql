-- Report cost_per_million: what a million images cost on each machine and configuration.
-- Input: latest (latest_results.sql), prices (schema.PRICES_SCHEMA), fx (schema.FX_SCHEMA).
-- Parameters: $currency (EUR | USD), the one currency of every money column;
-- $epoch_images, the images of one ImageNet training epoch (1,281,167).
--
-- Price matching, per result (status ok only; other statuses have no throughput):
--   same provider and instance_type; region and market equal where both are known (a price
--   row without region is valid in every region); the price's gpu_count, when known, at
--   least the GPUs the run used on one node; effective_from <= the result's date, latest
--   first. Exact region and market matches beat wildcards. No match: the row stays, with
--   empty money columns and price_source = 'missing'.
-- A run over num_nodes hosts rents num_nodes instances: price_per_hour is per instance × nodes.
-- Currency: the rate valid on the result's date (latest effective_from <= date), direct or
-- inverse; no rate: empty money columns and price_source = 'missing_fx'.
-- methodology (official | robust | custom) is carried from the result: rows of two
-- methodologies are separate rows, never one figure.
-- A price the user declared (gpucompare.prices.declared: its source starts with 'declared: ') shows
-- price_source 'declared' and its note (label and how the hourly price was made) in price_note: the
-- macros shown_price_source / declared_price_note (reports.inputs.connect, one rule for every report).
-- Provenance of every row: result_date and measured_at (when the figure was measured or
-- published), price_effective_from (the price's date), origin, result_source, target, flags.
-- Uncertainty: cost is price / throughput, so its 95 % interval is the price over the ends of the
-- throughput's (cost_per_million_low from images_per_sec_high), and the price is a range: the lowest
-- and highest price of the chosen series in force during the run window (the days from the first to
-- the last result of the run on that machine; spot prices move), price_per_hour_low/high.
-- With --nights N (an interval over nights), each night is priced at its own price and converted at
-- its own exchange rate (night_costs), and
-- the cost interval is a t interval over the nights' costs per image; the price range spans the
-- nights' prices too. interval_parts says what the cost interval covers: throughput+price for spot,
-- a price that moved during the run, or nights priced each at its own price; else throughput. interval_covers/interval_reason, samples, nights and the energy
-- columns are carried from latest (reports/uncertainty.py); sample_key is dropped before writing.
WITH ok AS (
    SELECT *, row_number() OVER () AS result_row
    FROM latest
    WHERE status = 'ok' AND images_per_sec > 0
),
hourly_prices AS (
    -- a price series = provider, instance type, region, market, GPU count; '' = any region
    SELECT
        provider, instance_type, coalesce(region, '') AS region_key, market,
        coalesce(gpu_count, 0) AS gpu_count_key, effective_from, currency, source,
        price * CASE unit WHEN 'hour' THEN 1 WHEN 'minute' THEN 60 WHEN 'second' THEN 3600 END
            AS price_per_instance_hour
    FROM prices
),
candidate_series AS (
    -- the few series that may price a result (no dates yet: that is the ASOF join's job)
    SELECT
        ok.result_row, ok.result_date, s.provider, s.instance_type, s.region_key, s.market,
        s.gpu_count_key,
        s.region_key = coalesce(ok.region, '') AS region_exact,
        s.market IS NOT DISTINCT FROM ok.market AS market_exact
    FROM ok
    JOIN (SELECT DISTINCT provider, instance_type, region_key, market, gpu_count_key FROM hourly_prices) AS s
      ON s.provider = ok.provider
     AND s.instance_type = ok.instance_type
     AND (s.region_key = '' OR ok.region IS NULL OR s.region_key = ok.region)
     AND (s.market IS NULL OR ok.market IS NULL OR s.market = ok.market)
     AND (s.gpu_count_key = 0 OR s.gpu_count_key >= ok.gpu_count / ok.num_nodes)
),
matched AS (
    -- each series' price on the result's date (latest effective_from <= date), best series first
    SELECT
        c.result_row, c.region_key, c.market AS series_market, c.gpu_count_key,
        p.price_per_instance_hour, p.currency AS price_currency,
        p.source AS price_source, p.effective_from AS price_effective_from,
        row_number() OVER (
            PARTITION BY c.result_row
            ORDER BY c.region_exact DESC, c.market_exact DESC, (c.market = 'on_demand') DESC,
                     p.effective_from DESC, c.region_key, p.source
        ) AS preference
    FROM candidate_series AS c
    ASOF JOIN hourly_prices AS p
      ON p.provider = c.provider
     AND p.instance_type = c.instance_type
     AND p.region_key = c.region_key
     AND p.market IS NOT DISTINCT FROM c.market
     AND p.gpu_count_key = c.gpu_count_key
     AND p.effective_from <= c.result_date
),
run_window AS (
    -- the days of each run on each machine (the prices that were in force while it ran)
    SELECT {{machine_key}}, run_id, min(result_date) AS window_from,
        max(result_date) AS window_to
    FROM ok GROUP BY ALL
),
price_range AS (
    -- the chosen series' lowest and highest price in force during the run window: the price at its
    -- first day and every later price that took effect before its last
    SELECT m.result_row, min(h.price_per_instance_hour) AS low, max(h.price_per_instance_hour) AS high
    FROM matched AS m
    JOIN ok ON ok.result_row = m.result_row
    JOIN run_window AS w
      ON w.provider = ok.provider AND w.instance_type = ok.instance_type
     AND w.region IS NOT DISTINCT FROM ok.region AND w.market IS NOT DISTINCT FROM ok.market
     AND w.run_id IS NOT DISTINCT FROM ok.run_id
    JOIN hourly_prices AS h
      ON h.provider = ok.provider AND h.instance_type = ok.instance_type AND h.region_key = m.region_key
     AND h.market IS NOT DISTINCT FROM m.series_market AND h.gpu_count_key = m.gpu_count_key
     AND h.currency = m.price_currency
     AND h.effective_from <= w.window_to
     AND h.effective_from >= (
        SELECT coalesce(max(f.effective_from), DATE '0001-01-01') FROM hourly_prices AS f
        WHERE f.provider = h.provider AND f.instance_type = h.instance_type AND f.region_key = h.region_key
          AND f.market IS NOT DISTINCT FROM h.market AND f.gpu_count_key = h.gpu_count_key
          AND f.effective_from <= w.window_from)
    WHERE m.preference = 1
    GROUP BY m.result_row
),
night_costs AS (
    -- --nights N (night_figures: the nights of each row whose interval is over nights): each night
    -- priced at the chosen series' price in force that night and converted at that night's rate
    -- (a night without a rate is left out); the log of its cost per image, in $currency, is the
    -- unit of the cost interval (a t interval over the nights, t_quantiles: df -> t). low/high:
    -- the nights' prices in the price's own currency (the price range, converted as the price is)
    SELECT result_row, count(*) AS priced_nights,
        avg(ln(price * night_rate) - log_figure) AS log_cost,
        stddev_samp(ln(price * night_rate) - log_figure) AS log_cost_sd,
        min(price) AS low, max(price) AS high
    FROM (
        SELECT np.*, CASE WHEN np.price_currency = $currency THEN 1.0 ELSE f.rate END AS night_rate
        FROM (
            SELECT m.result_row, m.price_currency, n.night, n.log_figure, p.price_per_instance_hour AS price
            FROM matched AS m
            JOIN ok ON ok.result_row = m.result_row
            JOIN night_figures AS n ON n.sample_key = ok.sample_key
            ASOF JOIN hourly_prices AS p
              ON p.provider = ok.provider AND p.instance_type = ok.instance_type AND p.region_key = m.region_key
             AND p.market IS NOT DISTINCT FROM m.series_market AND p.gpu_count_key = m.gpu_count_key
             AND p.currency = m.price_currency
             AND p.effective_from <= n.night
            WHERE m.preference = 1
        ) AS np
        ASOF LEFT JOIN fx_both_ways AS f
          ON f.from_currency = np.price_currency AND f.to_currency = $currency AND f.effective_from <= np.night
    )
    WHERE night_rate IS NOT NULL
    GROUP BY result_row
),
night_interval AS (
    SELECT c.result_row, c.low, c.high,
        exp(c.log_cost - t.t * c.log_cost_sd / sqrt(c.priced_nights)) AS per_image_low,
        exp(c.log_cost + t.t * c.log_cost_sd / sqrt(c.priced_nights)) AS per_image_high
    FROM night_costs AS c JOIN t_quantiles AS t ON t.df = c.priced_nights - 1
    WHERE c.priced_nights >= 2 AND c.log_cost_sd > 0
),
priced AS (
    SELECT ok.*, m.price_per_instance_hour, m.price_currency, m.price_source, m.price_effective_from,
        least(r.low, ni.low) AS price_low_per_instance_hour,
        greatest(r.high, ni.high) AS price_high_per_instance_hour,
        ni.per_image_low AS night_cost_low, ni.per_image_high AS night_cost_high
    FROM ok
    LEFT JOIN matched AS m ON m.result_row = ok.result_row AND m.preference = 1
    LEFT JOIN price_range AS r ON r.result_row = ok.result_row
    LEFT JOIN night_interval AS ni ON ni.result_row = ok.result_row
),
converted AS (
    SELECT priced.*,
        CASE
            WHEN price_currency IS NULL THEN NULL
            WHEN price_currency = $currency THEN 1.0
            ELSE f.rate
        END AS fx_rate
    FROM priced
    ASOF LEFT JOIN fx_both_ways AS f
      ON f.from_currency = priced.price_currency
     AND f.to_currency = $currency
     AND f.effective_from <= priced.result_date
),
money AS (
    SELECT *,
        price_per_instance_hour * num_nodes * fx_rate AS money_per_hour,
        least(price_low_per_instance_hour, price_per_instance_hour) * num_nodes * fx_rate AS money_per_hour_low,
        greatest(price_high_per_instance_hour, price_per_instance_hour) * num_nodes * fx_rate AS money_per_hour_high,
        1e6 / images_per_sec AS secs_per_million,
        CASE WHEN mode = 'train' THEN $epoch_images / images_per_sec END AS secs_per_epoch
    FROM converted
)
SELECT
    {{machine_key}}, gpu_model, worker_runtime, device_kind, gpu_count, num_nodes,
    mode, network, dtype, batch_size, methodology, images_per_sec,
    secs_per_million AS seconds_per_million,
    money_per_hour AS price_per_hour,
    money_per_hour * secs_per_million / 3600 AS cost_per_million,
    money_per_hour_low AS price_per_hour_low,
    money_per_hour_high AS price_per_hour_high,
    -- the nights' costs are in $currency already (each night at its own rate)
    coalesce(night_cost_low * num_nodes, money_per_hour_low / images_per_sec_high) * 1e6 / 3600
        AS cost_per_million_low,
    coalesce(night_cost_high * num_nodes, money_per_hour_high / images_per_sec_low) * 1e6 / 3600
        AS cost_per_million_high,
    images_per_sec_low, images_per_sec_high, interval_covers, interval_reason,
    CASE WHEN images_per_sec_low IS NULL OR money_per_hour IS NULL THEN NULL
         WHEN market = 'spot' OR money_per_hour_low < money_per_hour_high THEN 'throughput+price'
         ELSE 'throughput' END AS interval_parts,
    interval_df, noise_basis, noise_cv, samples, nights,
    $currency AS currency,
    CASE
        WHEN price_source IS NULL THEN 'missing'
        WHEN fx_rate IS NULL THEN 'missing_fx'
        ELSE shown_price_source(price_source)
    END AS price_source,
    declared_price_note(price_source) AS price_note,
    price_effective_from,
    price_currency,
    fx_rate,
    origin,
    result_source,
    target,
    measured_at,
    result_date,
    flags,
    secs_per_epoch AS epoch_seconds,
    money_per_hour * secs_per_epoch / 3600 AS epoch_cost,
    90 * secs_per_epoch AS epochs90_seconds,
    90 * secs_per_epoch / 3600 AS epochs90_hours,
    money_per_hour * 90 * secs_per_epoch / 3600 AS epochs90_cost,
    energy_method, avg_power_watts, joules_per_image, kwh_per_million, gco2e_per_million,
    sample_key
FROM money
ORDER BY mode, network, methodology, cost_per_million NULLS LAST, {{machine_key}}, gpu_count, batch_size,
         dtype
