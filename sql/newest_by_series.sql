-- Staging, step 1 of 2 (not a report): each series' newest date partition and its number of
-- results, by the results' series_key (lake.series: machine, configuration and methodology as
-- one 64-bit number, written by every writer of the table). One integer column is read (the
-- `date` partition comes from the file path, for free): a fraction of the cost of grouping by
-- the series' own columns, fourteen of them, text most of them.
-- Rows written before the key existed read it as null and form one group here (key null):
-- reports/newest.py then finds their series from their columns (newest_by_config.sql).
SELECT series_key AS "key", max(CAST("date" AS DATE)) AS newest_date, count(*) AS results
FROM results
GROUP BY series_key
