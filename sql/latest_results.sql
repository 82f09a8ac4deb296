-- Staging for cost_per_million, scaling, throughput and best_value (not a report itself).
-- One row per machine and configuration: the latest result of it, whatever its status.
-- machine = provider, instance_type, region, market
-- configuration = mode, network, dtype, batch_size, gpu_count, num_nodes, device_kind, kvstore
-- methodology = official | robust | custom (bench_tasks.methodology); null in records written
-- before the field existed, and in published figures, means official (the fixed batch counts
-- of MXNet's harness). A figure of each methodology is kept: every report downstream keeps
-- them apart (never ranks, pairs or compares one methodology's figure with another's).
-- Step 2 of 2 (step 1 is latest_dates.sql): `results` here holds only the date partitions
-- that are some configuration's newest, so this reads a few files, not the whole history.
-- Provenance carried to every report: origin (measured | published), result_date (the
-- date partition: the measurement's UTC day, or the publication date), measured_at (when it
-- finished; a published figure, which has no run, gets its publication date at 00:00 UTC),
-- flags (always a list, empty when none), run_id and config_id (which run and cell it was:
-- the projections report names the measured result it projects from), worker_runtime (the
-- software stack that produced it: pip-cu112, ngc-24.06, cpu …; null for published figures and
-- for records written before schema 3).
-- For the statistics (reports/uncertainty.py, which adds the interval, energy and sample_key columns):
-- images_per_sec_samples (the repeats), timed_batches and the energy fields of the same result.
SELECT
    {{machine_key}}, mode, network, dtype, batch_size,
    gpu_count, num_nodes, device_kind, kvstore, methodology,
    r.target, r.gpu_model, r.worker_runtime, r.per_device_batch, r.images_per_sec, r.cv, r.status,
    CASE WHEN r.target = 'published' THEN 'published' ELSE 'measured' END AS origin,
    r.source AS result_source, r.result_date, r.run_id, r.config_id,
    coalesce(r.measured_at, CAST(r.result_date AS TIMESTAMPTZ)) AS measured_at,
    coalesce(r.flags, CAST([] AS VARCHAR[])) AS flags,
    coalesce(r.samples, CAST([] AS DOUBLE[])) AS images_per_sec_samples, r.timed_batches,
    r.energy_joules, r.energy_method, r.avg_power_watts,
    row_number() OVER () AS sample_key
FROM (
    SELECT
        {{machine_key}}, mode, network, dtype, batch_size,
        gpu_count, num_nodes, device_kind, kvstore, coalesce(methodology, 'official') AS methodology,
        arg_max(
            struct_pack(
                target := target, gpu_model := gpu_model, worker_runtime := worker_runtime,
                per_device_batch := per_device_batch,
                images_per_sec := images_per_sec, cv := cv, status := status, source := source,
                result_date := CAST("date" AS DATE), measured_at := finished_at, flags := flags,
                run_id := run_id, config_id := config_id, samples := images_per_sec_samples,
                timed_batches := timed_batches, energy_joules := energy_joules,
                energy_method := energy_method, avg_power_watts := avg_power_watts
            ),
            coalesce(finished_at, CAST("date" AS TIMESTAMPTZ))
        ) AS r
    FROM results
    GROUP BY ALL
)
