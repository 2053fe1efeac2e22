CREATE OR REPLACE VIEW policy_lineage AS
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
),
problems AS (
    SELECT policy_id,
           string_agg(problem || ': ' || detail, '; ' ORDER BY detected_at) AS checkpoint_problem
    FROM checkpoint_problems GROUP BY policy_id
)
SELECT p.policy_id,
       p.system,
       p.parent_policy_id,
       coalesce(a.generation, 0) AS generation,
       coalesce(a.ancestors[1], p.policy_id) AS root_policy_id,
       list_append(coalesce(a.ancestors, []::VARCHAR[]), p.policy_id) AS lineage,
       p.created_at,
       p.training_workloads,
       p.metrics,
       c.checkpoint_problem
FROM policies p
LEFT JOIN ancestry a USING (policy_id)
LEFT JOIN problems c USING (policy_id);
