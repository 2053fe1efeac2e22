-- Checkpoints found missing or refused. A row marks a registered policy whose
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

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
