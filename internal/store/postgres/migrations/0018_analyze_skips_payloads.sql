-- ANALYZE gathers no statistics on the payload columns: webhook bodies and
-- headers, effect requests and responses, attempt responses, projected
-- entity states and audit details. No statement filters, joins or sorts
-- on them, so the planner has no use for their statistics, and computing
-- them (sorting a sample of up to 30,000 jsonb documents or long strings
-- for common values and a histogram) was half or more of an ANALYZE of
-- effects or entities.
--
-- Why it matters: the busy tables are analyzed each time they double
-- (AnalyzeGrown), and on a new, growing store ANALYZE was 7–9 % of the
-- database's statement time in the end-to-end benchmark. An ANALYZE also
-- holds a snapshot while it samples, below which no dead row version of
-- any table can be pruned; the oldest snapshots sampled during that
-- benchmark were ANALYZE's. Measured on a store of 14,000 events,
-- alternating four times: an ANALYZE of effects took 140 ms instead of
-- 361 (medians), of entities 74 instead of 151, of deliveries 204 instead
-- of 249, and of audit no less (docs/benchmarks-history.md, "Delivery
-- claims in due order, and where a second process's time goes").
--
-- SET STATISTICS takes a lock that reads and writes do not conflict with.
ALTER TABLE deliveries ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN headers SET STATISTICS 0;
ALTER TABLE effects ALTER COLUMN request SET STATISTICS 0, ALTER COLUMN last_response SET STATISTICS 0;
ALTER TABLE effect_attempts ALTER COLUMN response SET STATISTICS 0;
ALTER TABLE entities ALTER COLUMN state SET STATISTICS 0;
ALTER TABLE audit ALTER COLUMN detail SET STATISTICS 0;
