-- View fx_both_ways: every exchange rate in both directions, one per currency pair and date.
-- Input: fx (schema.FX_SCHEMA: 1 base = rate quote, from effective_from on).
-- A direct quote beats the inverse of another on the same date (inverse = 0 before 1). Every
-- report that converts money reads this view (cost_per_million at the result's date, projections
-- at the report date, campaign at the night), so a rate is turned around in one place only.
SELECT * FROM (
    SELECT base AS from_currency, quote AS to_currency, rate, effective_from, 0 AS inverse FROM fx
    UNION ALL
    SELECT quote, base, 1.0 / rate, effective_from, 1 FROM fx WHERE rate > 0
)
QUALIFY row_number() OVER (PARTITION BY from_currency, to_currency, effective_from ORDER BY inverse) = 1
