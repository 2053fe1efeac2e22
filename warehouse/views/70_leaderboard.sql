-- The leaderboard across families, from eval_summary. A learned policy's teacher (what it
-- imitated or searched with) and its paired ratio to it: `better_than_teacher` is false
-- where the learning is not shown to add anything over what it learned from.
-- `best_heuristic_chosen_on`: the split whose sequences chose the best heuristic
-- ("validation": held out from the ratios).
CREATE OR REPLACE VIEW leaderboard AS
WITH kinds AS (
    SELECT w.derivation AS workload_set,
           CASE WHEN bool_and(s.format = 'synthetic') THEN 'synthetic' ELSE 'production' END
               AS workload_kind
    FROM workloads w
    JOIN trace_sources s ON list_contains(string_split(w.source_ids, ','), s.source_id)
    GROUP BY ALL
),
everything AS (
    SELECT CASE WHEN e.scenario IS NOT NULL THEN 'paper'
                WHEN starts_with(e.workload_set, 'replay:') THEN 'production'
                ELSE coalesce(k.workload_kind, 'unknown') END AS kind,
           e.workload_set,
           e.scheduler,
           coalesce(e.family, CASE WHEN e.policy = e.scheduler THEN 'heuristic' ELSE 'learned' END)
               AS family,
           e.policy,
           coalesce(e.ratio_metric, 'avg_jct_s') AS metric,
           e.avg_jct_s,
           e.avg_jct_ci_low AS ci_low_s,
           e.avg_jct_ci_high AS ci_high_s,
           e.mean_slowdown,
           e.best_heuristic,
           e.best_heuristic_chosen_on,
           e.ratio_to_best_heuristic,
           e.ratio_ci_low,
           e.ratio_ci_high,
           e.n_runs,
           e.eval_id,
           e.evaluated_at,
           e.avg_jct_slots,
           CASE WHEN e.reference = 'drf' THEN 1 - e.jct_ratio END AS improvement_over_drf,
           e.teacher,
           e.ratio_to_teacher,
           e.teacher_ci_low,
           e.teacher_ci_high
    FROM eval_summary e
    LEFT JOIN kinds k USING (workload_set)
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
       x.best_heuristic_chosen_on,
       x.ratio_to_best_heuristic,
       x.ratio_ci_low,
       x.ratio_ci_high,
       TRUE AS ratio_paired,
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
           ORDER BY CASE WHEN x.metric = 'mean_slowdown' THEN x.mean_slowdown
                         ELSE x.avg_jct_s END
       ) AS rank,
       x.ci_low_s AS avg_jct_ci_low,
       x.ci_high_s AS avg_jct_ci_high,
       x.avg_jct_slots,
       x.improvement_over_drf,
       x.teacher,
       x.ratio_to_teacher,
       x.teacher_ci_low,
       x.teacher_ci_high,
       x.teacher_ci_high < 1 AS better_than_teacher,
       x.eval_id,
       x.evaluated_at
FROM everything x
LEFT JOIN newest n USING (workload_set)
LEFT JOIN largest l USING (workload_set, scheduler);
