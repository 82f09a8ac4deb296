-- Report throughput: images/s of every machine × network × batch size (tidy: one row a cell).
-- Input: latest (latest_results.sql). Cells that did not run keep their row: images_per_sec
-- is empty and status says why (oom, batch_smaller_than_devices, ...), as the published
-- tables mark them. The pivoted form (throughput_matrix.csv: one row per machine, mode,
-- dtype, GPU count, network and methodology, two columns per batch size: images/s and status)
-- is derived from this one. methodology: how the figure was timed (official | robust |
-- custom); a cell measured under two methodologies has a row for each.
-- Uncertainty and energy (reports/uncertainty.py computes them on latest, reports/evidence.py says
-- how): images_per_sec_low/high (95 % interval), interval_covers (this night's instance | N nights of
-- this type) or interval_reason (why none), interval_df, noise_basis, noise_cv, samples, nights,
-- joules_per_image, kwh_per_million, gco2e_per_million.
SELECT
    provider, instance_type, region, market, gpu_model, worker_runtime, device_kind, gpu_count, num_nodes,
    mode, network, dtype, batch_size, methodology, images_per_sec, images_per_sec_low, images_per_sec_high,
    interval_covers, interval_reason, interval_df, noise_basis, noise_cv, samples, nights, cv, status, origin, result_source, target,
    result_date, measured_at, flags, energy_method, avg_power_watts, joules_per_image, kwh_per_million,
    gco2e_per_million
FROM latest
ORDER BY provider, instance_type, region, market, mode, dtype, gpu_count, num_nodes, network, methodology,
         batch_size
