-- Report campaign: what each target's night cost, phase by phase (issue 14).
-- Input: run_phases_all (sql/run_phases_all.sql: the run-level phases the targets timed plus the
-- records' per-configuration setup, warm-up and timed seconds), prices, fx.
-- Parameter: $currency (EUR | USD), the one currency of every money column.
--
-- One row per run of a target (one target's night; night = the UTC day its first phase began):
--   billed_seconds: ec2, from the first billed moment (launch) to the end of the last billed
--     phase (terminated); ssh and local, the sweeps' wall time (the host is paid for anyway,
--     the run uses this much of it).
--   timed_seconds: inside timed batches; timed_share = timed / sweep wall time (the sweeps, plus
--     the kept configurations' seconds of machines lost mid-sweep);
--   overhead_ratio = billed / timed (empty when nothing was timed).
--   <phase>_seconds: provision, deploy, pull (a container runtime's image pull, timed apart from
--     the deploy it ran in), sweep (the worker's wall time of the sweeps that ran to
--     their end; a sweep whose machine was lost is a reclaim row), setup, warmup, timed,
--     sweep_other (sweep minus the configurations' own seconds: process and sweep start-up,
--     configurations that did not run ok, writing records), reclaim, teardown, idle (ec2: billed
--     time outside every phase: waits between Airflow tasks, collect).
--   reclaims: the machines lost mid-sweep or during their deploy (ec2 spot reclaims: the rows of
--     status 'lost').
--   reclaim_seconds: what the losses cost the night in time: the reclaim rows (each lost
--     machine's interrupted step, the replacement's launch, readiness, deploy and pull) less the
--     seconds of the configurations the lost machine finished (their ok records are kept and
--     counted in setup, warmup and timed: a record that started inside a lost row's span).
--   <phase>_cost: the billed seconds of the phase × the price per hour / 3600, in $currency;
--     a phase that was not billed costs 0; no price (e.g. local) = empty, never 0.
--   price_source, price_note: as in cost_per_million (a declared price: 'declared' and its label).
-- Price matching follows cost_per_million.sql: same provider and instance_type, region and
-- market equal where both are known (exact matches first, then on_demand), the latest
-- effective_from <= the night; converted at the night's rate (direct or inverse).
WITH run_level AS (
    SELECT * FROM run_phases_all WHERE config_id IS NULL
),
runs AS (
    SELECT
        run_id, min(target) AS target, min(kind) AS kind, min(provider) AS provider,
        min(instance_type) AS instance_type, min(region) AS region,
        -- the market the run got (prepare may fall back from spot): the latest row's
        arg_max(market, finished_at) AS market, min(dag_run_id) AS dag_run_id,
        CAST(min(started_at) AS DATE) AS night,
        min(started_at) AS started_at, max(finished_at) AS finished_at,
        sum(seconds) FILTER (WHERE phase = 'provision') AS provision_seconds,
        sum(seconds) FILTER (WHERE phase = 'deploy') AS deploy_seconds,
        sum(seconds) FILTER (WHERE phase = 'pull') AS pull_seconds,
        sum(seconds) FILTER (WHERE phase = 'sweep') AS sweep_seconds,
        sum(seconds) FILTER (WHERE phase = 'reclaim') AS reclaim_rows_seconds,
        sum(seconds) FILTER (WHERE phase = 'teardown') AS teardown_seconds,
        sum(seconds) FILTER (WHERE phase = 'provision' AND billed) AS provision_billed,
        sum(seconds) FILTER (WHERE phase = 'deploy' AND billed) AS deploy_billed,
        sum(seconds) FILTER (WHERE phase = 'pull' AND billed) AS pull_billed,
        sum(seconds) FILTER (WHERE phase = 'reclaim' AND billed) AS reclaim_rows_billed,
        sum(seconds) FILTER (WHERE phase = 'teardown' AND billed) AS teardown_billed,
        -- the sweeps' wall time, those of lost machines included (the configurations ran in both)
        sum(seconds) FILTER (WHERE phase = 'sweep' OR status = 'lost') AS ran_seconds,
        sum(seconds) FILTER (WHERE (phase = 'sweep' OR status = 'lost') AND billed) AS ran_billed,
        count(*) FILTER (WHERE status = 'lost') AS reclaims,
        coalesce(sum(seconds) FILTER (WHERE billed), 0) AS phases_billed,
        epoch(max(finished_at) FILTER (WHERE billed)) - epoch(min(started_at) FILTER (WHERE billed))
            AS billed_span,
        count(*) FILTER (WHERE status = 'failed') AS failed_phases,
        coalesce(bool_or(phase = 'teardown' AND status = 'ok'), false) AS torn_down
    FROM run_level
    GROUP BY run_id
),
lost AS (
    SELECT run_id, started_at, finished_at FROM run_level WHERE status = 'lost'
),
configs AS (
    SELECT
        c.run_id,
        count(DISTINCT c.config_id) AS configurations,
        sum(c.seconds) FILTER (WHERE c.phase = 'setup') AS setup_seconds,
        sum(c.seconds) FILTER (WHERE c.phase = 'warmup') AS warmup_seconds,
        sum(c.seconds) FILTER (WHERE c.phase = 'timed') AS timed_seconds,
        -- finished on a machine lost later in that sweep: kept, so not part of the reclaim's cost
        coalesce(sum(c.seconds) FILTER (WHERE l.run_id IS NOT NULL), 0) AS kept_seconds
    FROM run_phases_all AS c
    -- a machine is lost once at most at a time: the lost spans of a run do not overlap
    LEFT JOIN lost AS l
      ON l.run_id = c.run_id AND c.started_at >= l.started_at AND c.started_at < l.finished_at
    WHERE c.config_id IS NOT NULL
    GROUP BY c.run_id
),
measured AS (
    SELECT
        r.*,
        coalesce(c.configurations, 0) AS configurations,
        coalesce(c.setup_seconds, 0) AS setup_seconds,
        coalesce(c.warmup_seconds, 0) AS warmup_seconds,
        coalesce(c.timed_seconds, 0) AS timed_seconds,
        coalesce(c.kept_seconds, 0) AS kept_seconds,
        CASE WHEN r.kind = 'ec2' THEN coalesce(r.billed_span, 0) ELSE r.phases_billed END AS billed_seconds
    FROM runs AS r
    LEFT JOIN configs AS c USING (run_id)
),
split AS (
    SELECT
        *,
        greatest(coalesce(sweep_seconds, 0) - (setup_seconds + warmup_seconds + timed_seconds - kept_seconds), 0)
            AS sweep_other_seconds,
        greatest(coalesce(reclaim_rows_seconds, 0) - kept_seconds, 0) AS reclaim_seconds,
        greatest(coalesce(reclaim_rows_billed, 0) - kept_seconds, 0) AS reclaim_billed,
        greatest(billed_seconds - phases_billed, 0) AS idle_seconds,
        -- the configurations' share of the sweeps that was billed (ssh/local/ec2 sweeps: all of it)
        CASE WHEN coalesce(ran_seconds, 0) > 0 THEN coalesce(ran_billed, 0) / ran_seconds ELSE 0 END
            AS sweep_billed_share
    FROM measured
),
hourly_prices AS (
    SELECT
        provider, instance_type, coalesce(region, '') AS region_key, market, effective_from, currency,
        source,
        price * CASE unit WHEN 'hour' THEN 1 WHEN 'minute' THEN 60 WHEN 'second' THEN 3600 END
            AS price_per_instance_hour
    FROM prices
),
price_match AS (
    SELECT
        s.run_id, p.price_per_instance_hour, p.currency AS price_currency, p.source AS price_source,
        p.effective_from AS price_effective_from,
        row_number() OVER (
            PARTITION BY s.run_id
            ORDER BY p.region_key = coalesce(s.region, '') DESC, p.market IS NOT DISTINCT FROM s.market DESC,
                     (p.market = 'on_demand') DESC, p.effective_from DESC, p.region_key, p.source
        ) AS preference
    FROM split AS s
    JOIN hourly_prices AS p
      ON p.provider = s.provider
     AND p.instance_type = s.instance_type
     AND (p.region_key = '' OR s.region IS NULL OR p.region_key = s.region)
     AND (p.market IS NULL OR s.market IS NULL OR p.market = s.market)
     AND p.effective_from <= s.night
),
priced AS (
    SELECT
        s.*, m.price_source, m.price_effective_from, m.price_currency,
        m.price_per_instance_hour * CASE
            WHEN m.price_currency = $currency THEN 1.0
            ELSE (SELECT f.rate FROM fx_both_ways AS f
                  WHERE f.from_currency = m.price_currency AND f.to_currency = $currency
                    AND f.effective_from <= s.night
                  ORDER BY f.effective_from DESC, f.inverse LIMIT 1)
        END AS price_per_hour
    FROM split AS s
    LEFT JOIN price_match AS m ON m.run_id = s.run_id AND m.preference = 1
)
SELECT
    night, target, kind, {{machine_key}}, run_id, dag_run_id,
    started_at, finished_at, configurations, failed_phases, torn_down,
    billed_seconds,
    timed_seconds,
    CASE WHEN coalesce(sweep_seconds, 0) + kept_seconds > 0
         THEN timed_seconds / (coalesce(sweep_seconds, 0) + kept_seconds) END AS timed_share,
    CASE WHEN timed_seconds > 0 THEN billed_seconds / timed_seconds END AS overhead_ratio,
    coalesce(provision_seconds, 0) AS provision_seconds,
    coalesce(deploy_seconds, 0) AS deploy_seconds,
    coalesce(pull_seconds, 0) AS pull_seconds,
    coalesce(sweep_seconds, 0) AS sweep_seconds,
    setup_seconds, warmup_seconds, sweep_other_seconds,
    reclaims, reclaim_seconds,
    coalesce(teardown_seconds, 0) AS teardown_seconds,
    idle_seconds,
    price_per_hour,
    CASE WHEN price_per_hour IS NOT NULL THEN $currency END AS currency,
    CASE WHEN price_per_hour IS NOT NULL THEN shown_price_source(price_source)
         WHEN price_source IS NOT NULL THEN 'missing_fx' ELSE 'missing' END AS price_source,
    CASE WHEN price_per_hour IS NOT NULL THEN declared_price_note(price_source) END AS price_note,
    price_per_hour * coalesce(provision_billed, 0) / 3600 AS provision_cost,
    price_per_hour * coalesce(deploy_billed, 0) / 3600 AS deploy_cost,
    price_per_hour * coalesce(pull_billed, 0) / 3600 AS pull_cost,
    price_per_hour * setup_seconds * sweep_billed_share / 3600 AS setup_cost,
    price_per_hour * warmup_seconds * sweep_billed_share / 3600 AS warmup_cost,
    price_per_hour * timed_seconds * sweep_billed_share / 3600 AS timed_cost,
    price_per_hour * sweep_other_seconds * sweep_billed_share / 3600 AS sweep_other_cost,
    price_per_hour * reclaim_billed / 3600 AS reclaim_cost,
    price_per_hour * coalesce(teardown_billed, 0) / 3600 AS teardown_cost,
    price_per_hour * idle_seconds / 3600 AS idle_cost,
    price_per_hour * billed_seconds / 3600 AS billed_cost
FROM priced
ORDER BY night, target, started_at, run_id
