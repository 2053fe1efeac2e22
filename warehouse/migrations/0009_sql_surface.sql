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

-- Each registered policy with its ancestry: generation 0 is a policy trained from scratch
-- or from a heuristic's decisions; `lineage` lists the ids from that root to the policy.

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
