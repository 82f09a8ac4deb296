-- Report regressions: each machine's latest result of every configuration against the
-- history of the same machine and configuration.
-- Input: recent (the lake's results of the last $lookback_days days before the newest
-- night, read with the date partition filter pushed into the scan, so the cost is that of
-- a few weeks of data, not of the whole lake). Parameters: $history_runs (N), $min_history,
-- $mad_factor (k), $min_drop (relative floor).
--
-- Series: machine and configuration, config_id (two sweeps may run the same cell under
-- different series tags, weak and strong, each a history of its own) and methodology
-- (official | robust | custom; null = official): a figure is only ever judged against the
-- history of its own methodology, so a switch from robust to official is never a regression.
-- Software stack: worker_runtime (pip-cu112, ngc-24.06, cpu …; records before schema 3 have
-- none: they ran pip-cu112 on a GPU, cpu otherwise) and framework_build (the MXNet build, CUDA,
-- cuDNN, Python and image the worker reported; empty before schema 3). A figure is judged only
-- against history of its own runtime and build: a series whose previous result ran another one
-- is marked 'software_stack_changed' (a new baseline starts), never a regression
-- (previous_runtime says which runtime it was, build_changed whether the build changed).
-- current  = the latest result (by finished_at) of the series;
-- history  = its N previous results with status ok and the current one's runtime and build;
-- noise    = k × 1.4826 × MAD(history): the night-to-night spread (MAD scaled to a standard
--            deviation), the statistical bound of a drop;
-- floor    = min_drop × median(history): the practical bound (a drop smaller than this matters
--            little, however sure);
-- verdict  = 'software_stack_changed' (the previous result ran another runtime or build),
--            'failed' (the latest did not run ok, where some earlier result did),
--            'not_run' (the latest did not run ok, nor did any earlier one: e.g. always oom),
--            'insufficient_history' (fewer than min_history ok results before),
--            'regression' (images_per_sec < median − max(noise, floor)),
--            'significant_below_floor' (a drop beyond the noise but within the floor: here only a
--            candidate, 'below_floor'),
--            'improvement' (images_per_sec > median + max(noise, floor)), else 'steady';
--            then (reports/uncertainty.py) a regression, improvement or below-floor drop stands
--            only where the Mann-Whitney U test of the latest repeats against the history's
--            repeats finds the difference significant (p < 0.05): the thresholds are the minimum
--            effect size, the test the evidence. Where the sample sizes cannot reach 5 % at all
--            (one repeat a night against a short history), the thresholds alone decide a
--            regression or improvement, a below-floor drop is not claimed (it becomes 'steady'),
--            and p_value is empty.
-- regression = verdict in ('regression', 'failed').
-- One window (row_number) over one integer series key and the newest results of each series, a second only for the few series whose
-- stack changed in the window, and one hash aggregation over the recent rows: linear, no
-- self-join. The series key is hash() of the fourteen series columns: two series would share a
-- window only if their 64-bit hashes collided (about 1 in 10^11 for 12,000 series).
WITH base AS MATERIALIZED (
    -- the columns the query reads, named (`SELECT *` carried every column of the files through this
    -- materialized step: 0.385 -> 0.33 CPU-s on the 10M-row bench, the same table)
    SELECT {{machine_key}}, mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind, kvstore,
           config_id, gpu_model, images_per_sec, status, finished_at, "date", images_per_sec_samples,
           coalesce(methodology, 'official') AS methodology,
           coalesce(worker_runtime, CASE WHEN device_kind = 'gpu' THEN 'pip-cu112' ELSE 'cpu' END)
               AS worker_runtime,
           -- the build's text is long: compare its hash (hash(NULL) is not NULL)
           CASE WHEN framework_build IS NOT NULL THEN hash(framework_build) END AS build,
           -- the series as one number: a window partitioned by one integer column costs a
           -- fraction of one partitioned by fourteen text columns
           hash({{machine_key}}, mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind,
                kvstore, config_id, coalesce(methodology, 'official')) AS series
    FROM recent
    WHERE target IS DISTINCT FROM 'published'
),
cut AS (
    -- what the window needs of each series: its $history_runs + 1 newest results, unless its
    -- stack changed in the window (more than one runtime or build: then the history of the current
    -- stack may lie further back, and every result is kept) or fewer results have a finish time.
    -- A result older than the newest $history_runs + 1 is past every age the verdict reads, so
    -- leaving it out of the window changes nothing (the window is a quarter of the rows).
    SELECT series,
           count(DISTINCT worker_runtime) > 1 OR count(DISTINCT build) > 1
               OR count(finished_at) < $history_runs + 1 AS keep_all,
           list_min(arg_max(finished_at, finished_at, $history_runs + 1)) AS since
    FROM base
    GROUP BY series
),
ordered AS MATERIALIZED (
  SELECT *, worker_runtime = current_runtime
            AND (build IS NULL OR current_build IS NULL OR build = current_build) AS same_stack
  FROM (
    SELECT
        {{machine_key}}, mode, network, dtype, batch_size, gpu_count,
        num_nodes, device_kind, kvstore, config_id, gpu_model, images_per_sec, status,
        finished_at, CAST("date" AS DATE) AS result_date, images_per_sec_samples,
        methodology, worker_runtime, build, b.series,
        row_number() OVER by_series AS age,
        first_value(worker_runtime) OVER by_series AS current_runtime,
        first_value(build) OVER by_series AS current_build
    FROM base AS b JOIN cut AS c ON c.series = b.series
    WHERE c.keep_all OR b.finished_at >= c.since
    WINDOW by_series AS (PARTITION BY b.series ORDER BY finished_at DESC NULLS LAST)
  )
),
numbered AS (
    -- history counts only results of the current result's stack (its own age, 2 = previous): its
    -- runtime, and its build where both builds are known (records before schema 3 have none).
    -- A series whose results all ran the current stack (nearly every one) numbers them by age
    -- already; only the few whose stack changed in the window need a second window
    SELECT *, CASE WHEN same_stack THEN age END AS same_age
    FROM ordered WHERE series NOT IN (SELECT series FROM ordered WHERE NOT same_stack)
    UNION ALL
    SELECT *,
        CASE WHEN same_stack THEN row_number() OVER (
            PARTITION BY series, same_stack ORDER BY finished_at DESC NULLS LAST) END AS same_age
    FROM ordered WHERE series IN (SELECT series FROM ordered WHERE NOT same_stack)
),
summary AS (
    SELECT
        {{machine_key}}, mode, network, dtype, batch_size, gpu_count,
        num_nodes, device_kind, kvstore, config_id, methodology,
        any_value(gpu_model) FILTER (WHERE age = 1) AS gpu_model,
        any_value(worker_runtime) FILTER (WHERE age = 1) AS worker_runtime,
        any_value(worker_runtime) FILTER (WHERE age = 2) AS previous_runtime,
        any_value(build) FILTER (WHERE age = 1) AS build,
        any_value(build) FILTER (WHERE age = 2) AS previous_build,
        any_value(status) FILTER (WHERE age = 1) AS status,
        max(images_per_sec) FILTER (WHERE age = 1) AS images_per_sec,
        max(finished_at) FILTER (WHERE age = 1) AS measured_at,
        max(result_date) FILTER (WHERE age = 1) AS result_date,
        count(*) FILTER (WHERE same_age > 1 AND same_age <= $history_runs + 1 AND status = 'ok')
            AS history_runs,
        median(images_per_sec) FILTER (WHERE same_age > 1 AND same_age <= $history_runs + 1 AND status = 'ok')
            AS history_median,
        mad(images_per_sec) FILTER (WHERE same_age > 1 AND same_age <= $history_runs + 1 AND status = 'ok')
            AS history_mad,
        min(result_date) FILTER (WHERE same_age > 1 AND same_age <= $history_runs + 1 AND status = 'ok')
            AS history_from,
        flatten(list(images_per_sec_samples) FILTER (WHERE age = 1)) AS current_samples,
        flatten(list(images_per_sec_samples) FILTER (WHERE same_age > 1 AND same_age <= $history_runs + 1
                                                        AND status = 'ok')) AS history_sample_list
    FROM numbered
    WHERE age <= 2 OR same_age <= $history_runs + 1
    GROUP BY ALL
),
judged AS (
    SELECT *,
        $mad_factor * 1.4826 * history_mad AS noise,
        $min_drop * history_median AS floor
    FROM summary
)
SELECT
    {{machine_key}}, gpu_model, worker_runtime, previous_runtime, device_kind,
    gpu_count, num_nodes, mode, network, dtype, batch_size, config_id, methodology, status, images_per_sec,
    coalesce(previous_runtime = worker_runtime AND previous_build <> build, false) AS build_changed,
    measured_at, result_date, history_runs, history_from, history_median, history_mad, noise, floor,
    images_per_sec / history_median - 1 AS change,
    CASE
        WHEN previous_runtime <> worker_runtime OR previous_build <> build THEN 'software_stack_changed'
        WHEN status IS DISTINCT FROM 'ok' AND history_runs > 0 THEN 'failed'
        WHEN status IS DISTINCT FROM 'ok' THEN 'not_run'
        WHEN history_runs < $min_history THEN 'insufficient_history'
        WHEN images_per_sec < history_median - greatest(noise, floor) THEN 'regression'
        WHEN images_per_sec < history_median - noise THEN 'below_floor'
        WHEN images_per_sec > history_median + greatest(noise, floor) THEN 'improvement'
        ELSE 'steady'
    END AS verdict,
    NOT coalesce(previous_runtime <> worker_runtime OR previous_build <> build, false) AND coalesce(
        (status IS DISTINCT FROM 'ok' AND history_runs > 0)
        OR (status = 'ok' AND history_runs >= $min_history
            AND images_per_sec < history_median - greatest(noise, floor)),
        false
    ) AS regression,
    current_samples, history_sample_list
FROM judged
ORDER BY regression DESC, change NULLS FIRST, {{machine_key}}, mode, network,
         dtype, batch_size, gpu_count, methodology, config_id
