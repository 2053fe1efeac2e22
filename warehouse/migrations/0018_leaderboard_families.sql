-- The leaderboard across families: every evaluation's schedulers with their
-- family (heuristic, dl2, harmony, chic, rl-taps, ...) and their ratio to the best
-- non-oracle heuristic of the same workload set, paired by sequence and seed where the
-- evaluation keeps runs (eval_summary, harmony_evaluation), unpaired where it keeps only
-- means (chic_evaluation, rltaps_evaluation: `ratio_paired` says which).

ALTER TABLE eval_summary ADD COLUMN family VARCHAR;
ALTER TABLE eval_summary ADD COLUMN best_heuristic VARCHAR;
ALTER TABLE eval_summary ADD COLUMN ratio_to_best_heuristic DOUBLE;
ALTER TABLE eval_summary ADD COLUMN ratio_ci_low DOUBLE;
ALTER TABLE eval_summary ADD COLUMN ratio_ci_high DOUBLE;

DROP VIEW IF EXISTS leaderboard;

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
