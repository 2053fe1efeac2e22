-- Checkpoints found missing or refused (issue 17). A row marks a registered policy whose
-- file under policies/ could not be used when a stage needed it: 'missing' (no such file,
-- unreadable) or 'refused' (bytes, config or shapes do not match the registry). Stages then
-- resume from the newest usable ancestor, or from scratch.
--
-- Why a table of its own rather than a column of `policies`: DuckDB refuses every UPDATE of
-- `policies` in this schema ("learning_curves is not an table": the foreign key of the
-- table 0009 renamed to dl2_learning_curves is still recorded under its old name), so a
-- mark cannot be written into a policy's row. `policy_lineage` shows it beside each policy.
-- Contract: models.contracts.CheckpointProblems (written by models/checkpoints.py).
CREATE TABLE checkpoint_problems (
    policy_id       VARCHAR   NOT NULL REFERENCES policies (policy_id),
    problem         VARCHAR   NOT NULL CHECK (problem IN ('missing', 'refused')),
    detail          VARCHAR   NOT NULL CHECK (length(detail) > 0),
    checkpoint_path VARCHAR   NOT NULL,
    detected_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (policy_id, problem)
);

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
