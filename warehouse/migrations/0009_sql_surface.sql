-- The SQL surface users query (README "Querying results"): the leaderboard and the policy
-- lineage as views; DL2's wide learning-curve table renamed so that `learning_curves` can
-- become the all-systems view (a later migration, once every system's curve table exists).

ALTER TABLE learning_curves RENAME TO dl2_learning_curves;

-- When each evaluation's summary rows were written (NULL for rows written before this).
ALTER TABLE eval_summary ADD COLUMN evaluated_at TIMESTAMP;

-- Every evaluated scheduler by workload set: average JCT, its improvement over DRF (paired
-- by workload and seed), rank within the evaluation, and whether the workloads came from
-- production traces or synthetic ones. Every evaluation stays, so after retraining the old
-- and the new policies both appear; `latest` marks each workload set's newest evaluation.
CREATE VIEW leaderboard AS
WITH kinds AS (
    SELECT w.derivation AS workload_set,
           CASE WHEN bool_and(s.format = 'synthetic') THEN 'synthetic' ELSE 'production' END
               AS workload_kind
    FROM workloads w
    JOIN trace_sources s ON list_contains(string_split(w.source_ids, ','), s.source_id)
    GROUP BY ALL
),
newest AS (
    SELECT workload_set, max(evaluated_at) AS evaluated_at FROM eval_summary GROUP BY ALL
)
SELECT coalesce(k.workload_kind, 'unknown') AS workload_kind,
       e.workload_set,
       e.scheduler,
       e.policy,
       e.avg_jct_s,
       e.avg_jct_ci_low,
       e.avg_jct_ci_high,
       e.avg_jct_slots,
       CASE WHEN e.reference = 'drf' THEN 1 - e.jct_ratio END AS improvement_over_drf,
       rank() OVER (PARTITION BY e.eval_id, e.workload_set ORDER BY e.avg_jct_s) AS rank,
       e.n_runs,
       e.eval_id,
       e.evaluated_at,
       e.evaluated_at IS NOT DISTINCT FROM n.evaluated_at AS latest
FROM eval_summary e
LEFT JOIN kinds k USING (workload_set)
LEFT JOIN newest n USING (workload_set);

-- Each registered policy with its ancestry: generation 0 is a policy trained from scratch
-- or from a heuristic's decisions; `lineage` lists the ids from that root to the policy.
CREATE VIEW policy_lineage AS
WITH RECURSIVE chain (policy_id, ancestor_id, depth) AS (
    SELECT policy_id, parent_policy_id, 1 FROM policies WHERE parent_policy_id IS NOT NULL
    UNION ALL
    SELECT c.policy_id, p.parent_policy_id, c.depth + 1
    FROM chain c JOIN policies p ON p.policy_id = c.ancestor_id
    WHERE p.parent_policy_id IS NOT NULL
),
ancestry AS (
    SELECT policy_id, max(depth) AS generation,
           list(ancestor_id ORDER BY depth DESC) AS ancestors
    FROM chain GROUP BY ALL
)
SELECT p.policy_id,
       p.system,
       p.parent_policy_id,
       coalesce(a.generation, 0) AS generation,
       coalesce(a.ancestors[1], p.policy_id) AS root_policy_id,
       list_append(coalesce(a.ancestors, []::VARCHAR[]), p.policy_id) AS lineage,
       p.created_at,
       p.training_workloads,
       p.metrics
FROM policies p
LEFT JOIN ancestry a USING (policy_id);
