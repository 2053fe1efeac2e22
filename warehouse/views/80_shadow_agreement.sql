-- Per shadow day (source) and policy: how often the shadowed policy agreed with the real
-- scheduler on the jobs pending at its decisions, how many jobs it would have started that
-- the real one held, and the converse (tracelib/shadow/trace.py defines each row).
CREATE OR REPLACE VIEW shadow_agreement AS
SELECT source_id,
       cluster,
       CAST(min(snapshot_time) AS DATE) AS day,
       policy,
       count(DISTINCT decision_id) AS decisions,
       count(*) AS pending_rows,
       avg(CAST(same_action AS DOUBLE)) AS agreement,
       count(*) FILTER (WHERE policy_start AND NOT real_started) AS policy_started_real_held,
       count(*) FILTER (WHERE real_started AND NOT policy_start) AS real_started_policy_held,
       count(*) FILTER (WHERE policy_start AND real_started) AS both_started,
       avg(CAST(same_servers AS DOUBLE)) AS same_servers_rate,
       quantile_cont(latency_ms, 0.5) AS median_latency_ms
FROM shadow_decisions
GROUP BY source_id, cluster, policy;
