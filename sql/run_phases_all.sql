-- View run_phases_all: every phase of every measured run, one row each (schema.PHASES).
-- Inputs: run_phases (schema.RUN_PHASES_SCHEMA: the run-level phases the targets timed:
-- provision, deploy, pull, sweep, reclaim, teardown) and results (the records).
-- The per-configuration phases are not stored in run_phases: they are the ok records' own
-- setup_seconds (process start for the first configuration of a process, symbol, bind,
-- parameters, input), warmup_seconds and timed_seconds (summed over the repeats), unpivoted
-- here, so the one copy of them is the one ingested with the results (a re-ingest of a run
-- replaces both at once). Their times are placed one after the other from the record's
-- started_at (setup, then warm-up, then timed); they are inside the run's sweep phase, so
-- they are billed whatever the target kind. ``target`` is the fleet entry's name when the run
-- recorded phases, else the kind (results store the kind only).
WITH run_names AS (
    SELECT run_id, min(target) AS target FROM run_phases GROUP BY run_id
),
records AS (
    SELECT r.run_id, r.dag_run_id, coalesce(n.target, r.target) AS target, r.target AS kind,
           {{machine_key r.}}, r.config_id, r.code_hash,
           r.started_at, r.setup_seconds, r.warmup_seconds, r.timed_seconds
    FROM results AS r
    LEFT JOIN run_names AS n ON n.run_id = r.run_id
    WHERE r.target IN ('local', 'ssh', 'ec2') AND r.status = 'ok'
      AND r.setup_seconds IS NOT NULL AND r.warmup_seconds IS NOT NULL AND r.timed_seconds IS NOT NULL
),
config_phases AS (
    SELECT *, 'setup' AS phase, 0.0 AS offset_s, setup_seconds AS seconds FROM records
    UNION ALL
    SELECT *, 'warmup', setup_seconds, warmup_seconds FROM records
    UNION ALL
    SELECT *, 'timed', setup_seconds + warmup_seconds, timed_seconds FROM records
)
SELECT run_id, dag_run_id, target, kind, {{machine_key}}, phase, config_id,
       started_at, finished_at, seconds, billed, status, date, code_hash
FROM run_phases
UNION ALL
SELECT run_id, dag_run_id, target, kind, {{machine_key}}, phase, config_id,
       started_at + to_microseconds(CAST(round(offset_s * 1e6) AS BIGINT)) AS started_at,
       started_at + to_microseconds(CAST(round((offset_s + seconds) * 1e6) AS BIGINT)) AS finished_at,
       seconds, true AS billed, 'ok' AS status, CAST(started_at AS DATE) AS date, code_hash
FROM config_phases
