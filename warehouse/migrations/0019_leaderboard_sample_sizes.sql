-- The leaderboard shows each evaluation's sample size beside the largest one's (issue 19):
-- `latest` picks each workload set's newest evaluation, so a small ad-hoc `schedlab
-- evaluate` (1 seed, 1 sequence) after the nightly run would otherwise hide the nightly's
-- larger sample. Every row now says how many runs the largest evaluation of the same set
-- and scheduler has and which it is (`largest_n_runs`, `largest_eval_id`), and whether this
-- row's evaluation is smaller (`smaller_than_largest`).

DROP VIEW leaderboard;

CREATE VIEW leaderboard AS
WITH kinds AS (
    SELECT w.derivation AS workload_set,
           CASE WHEN bool_and(s.format = 'synthetic') THEN 'synthetic' ELSE 'production' END
               AS workload_kind
    FROM workloads w
    JOIN trace_sources s ON list_contains(string_split(w.source_ids, ','), s.source_id)
    GROUP BY ALL
),
evaluations AS (
    SELECT CASE WHEN starts_with(e.workload_set, 'replay:') THEN 'production'
                ELSE coalesce(k.workload_kind, 'unknown') END AS kind,
           e.workload_set,
           e.scheduler,
           coalesce(e.family, CASE WHEN e.policy = e.scheduler THEN 'heuristic' ELSE 'learned' END)
               AS family,
           e.policy,
           'avg_jct_s' AS metric,
           e.avg_jct_s,
           e.avg_jct_ci_low AS ci_low_s,
           e.avg_jct_ci_high AS ci_high_s,
           e.mean_slowdown,
           e.best_heuristic,
           e.ratio_to_best_heuristic,
           e.ratio_ci_low,
           e.ratio_ci_high,
           TRUE AS ratio_paired,
           e.n_runs,
           e.eval_id,
           e.evaluated_at,
           e.avg_jct_slots,
           CASE WHEN e.reference = 'drf' THEN 1 - e.jct_ratio END AS improvement_over_drf
    FROM eval_summary e
    LEFT JOIN kinds k USING (workload_set)
),
harmony AS (
    SELECT 'paper' AS kind,
           'harmony:' || pattern AS workload_set,
           scheduler,
           CASE WHEN policy_id IS NULL THEN 'heuristic' ELSE 'harmony' END AS family,
           coalesce(policy_id, scheduler) AS policy,
           'avg_jct_s' AS metric,
           avg_jct_s,
           ci_low_s,
           ci_high_s,
           NULL::DOUBLE AS mean_slowdown,
           best_baseline AS best_heuristic,
           paired_ratio AS ratio_to_best_heuristic,
           paired_ratio_ci_low AS ratio_ci_low,
           paired_ratio_ci_high AS ratio_ci_high,
           TRUE AS ratio_paired,
           n_sequences AS n_runs,
           eval_id,
           evaluated_at,
           avg_jct_intervals AS avg_jct_slots,
           NULL::DOUBLE AS improvement_over_drf
    FROM harmony_evaluation
),
chic_best AS (
    SELECT eval_id, rate_per_hour, arg_min(system, avg_jct_s) AS best, min(avg_jct_s) AS best_jct
    FROM chic_evaluation WHERE starts_with(system, 'optimus-') GROUP BY ALL
),
chic AS (
    SELECT 'paper' AS kind,
           'chic@' || c.rate_per_hour || '/h' AS workload_set,
           c.system AS scheduler,
           CASE WHEN c.policy_id IS NULL THEN 'heuristic' ELSE 'chic' END AS family,
           coalesce(c.policy_id, c.system) AS policy,
           'avg_jct_s' AS metric,
           c.avg_jct_s,
           c.avg_jct_s - c.ci95_s AS ci_low_s,
           c.avg_jct_s + c.ci95_s AS ci_high_s,
           NULL::DOUBLE AS mean_slowdown,
           b.best AS best_heuristic,
           c.avg_jct_s / b.best_jct AS ratio_to_best_heuristic,
           NULL::DOUBLE AS ratio_ci_low,
           NULL::DOUBLE AS ratio_ci_high,
           FALSE AS ratio_paired,
           c.n_sequences AS n_runs,
           c.eval_id,
           c.evaluated_at,
           NULL::DOUBLE AS avg_jct_slots,
           NULL::DOUBLE AS improvement_over_drf
    FROM chic_evaluation c LEFT JOIN chic_best b USING (eval_id, rate_per_hour)
),
rltaps_best AS (
    SELECT run_id, sequence_set, arg_min(scheduler, mean_slowdown) AS best,
           min(mean_slowdown) AS best_slowdown
    FROM rltaps_evaluation WHERE scheduler NOT LIKE 'rl-taps%' GROUP BY ALL
),
rltaps AS (
    SELECT 'paper' AS kind,
           'rl-taps:' || r.sequence_set AS workload_set,
           r.scheduler,
           CASE WHEN r.policy_id IS NULL THEN 'heuristic' ELSE 'rl-taps' END AS family,
           coalesce(r.policy_id, r.scheduler) AS policy,
           'mean_slowdown' AS metric,
           NULL::DOUBLE AS avg_jct_s,
           NULL::DOUBLE AS ci_low_s,
           NULL::DOUBLE AS ci_high_s,
           r.mean_slowdown,
           b.best AS best_heuristic,
           r.mean_slowdown / b.best_slowdown AS ratio_to_best_heuristic,
           NULL::DOUBLE AS ratio_ci_low,
           NULL::DOUBLE AS ratio_ci_high,
           FALSE AS ratio_paired,
           r.n_sequences AS n_runs,
           r.run_id AS eval_id,
           NULL::TIMESTAMP AS evaluated_at,
           NULL::DOUBLE AS avg_jct_slots,
           NULL::DOUBLE AS improvement_over_drf
    FROM rltaps_evaluation r LEFT JOIN rltaps_best b USING (run_id, sequence_set)
),
everything AS (
    SELECT * FROM evaluations
    UNION ALL BY NAME SELECT * FROM harmony
    UNION ALL BY NAME SELECT * FROM chic
    UNION ALL BY NAME SELECT * FROM rltaps
),
newest AS (
    SELECT workload_set, max(evaluated_at) AS newest_at, max(eval_id) AS newest_id
    FROM everything GROUP BY ALL
),
largest AS (
    -- The evaluation with the most runs of each set and scheduler (the newest of equals).
    SELECT DISTINCT workload_set, scheduler,
           first_value(n_runs) OVER w AS largest_n_runs,
           first_value(eval_id) OVER w AS largest_eval_id
    FROM everything
    WINDOW w AS (PARTITION BY workload_set, scheduler
                 ORDER BY n_runs DESC, evaluated_at DESC NULLS LAST, eval_id DESC)
)
SELECT x.workload_set,
       x.kind,
       x.kind AS workload_kind,
       x.scheduler,
       x.family,
       x.policy,
       x.metric,
       x.avg_jct_s,
       x.ci_low_s,
       x.ci_high_s,
       x.mean_slowdown,
       x.best_heuristic,
       x.ratio_to_best_heuristic,
       x.ratio_ci_low,
       x.ratio_ci_high,
       x.ratio_paired,
       x.ratio_ci_high < 1 AS significantly_better,
       x.ratio_ci_low > 1 AS significantly_worse,
       x.n_runs,
       l.largest_n_runs,
       l.largest_eval_id,
       x.n_runs < l.largest_n_runs AS smaller_than_largest,
       CASE WHEN n.newest_at IS NULL THEN x.eval_id = n.newest_id
            ELSE x.evaluated_at IS NOT DISTINCT FROM n.newest_at END AS latest,
       rank() OVER (
           PARTITION BY x.eval_id, x.workload_set
           ORDER BY coalesce(x.avg_jct_s, x.mean_slowdown)
       ) AS rank,
       x.avg_jct_ci_low_compat AS avg_jct_ci_low,
       x.avg_jct_ci_high_compat AS avg_jct_ci_high,
       x.avg_jct_slots,
       x.improvement_over_drf,
       x.eval_id,
       x.evaluated_at
FROM (SELECT *, ci_low_s AS avg_jct_ci_low_compat, ci_high_s AS avg_jct_ci_high_compat
      FROM everything) x
LEFT JOIN newest n USING (workload_set)
LEFT JOIN largest l USING (workload_set, scheduler);
