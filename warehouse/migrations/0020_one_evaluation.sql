-- One evaluation: Harmony's, Chic's and RL-TAPS' evaluations in their own
-- papers' scenarios write eval_runs / eval_jobs / eval_summary like every other evaluation
-- (pipelines/evaluation.py run_schedulers and summarize_runs), with `workload_set` naming
-- the scenario (harmony-uniform, harmony-poisson, harmony-google, chic@<rate>/h,
-- rl-taps-bimodal) and eval_summary.scenario the paper whose scenario it is (harmony, chic,
-- rl-taps; NULL for a workload set of the warehouse or a replay). Their old tables become
-- views over eval_summary with their old columns, and the leaderboard reads eval_summary
-- only: every ratio is paired by (sequence, seed) and has its interval.

-- The episode's return where the scenario's MDP defines one (RL-TAPS' G_1).
ALTER TABLE eval_runs ADD COLUMN reward DOUBLE;

ALTER TABLE eval_summary ADD COLUMN scenario VARCHAR;
-- The per-run cost the ratios pair (jct_ratio, ratio_to_best_heuristic): avg_jct_s, or
-- mean_slowdown in RL-TAPS' scenario (its paper's metric). NULL in older rows: avg_jct_s.
-- (DuckDB adds no column with a CHECK: the contract checks the values.)
ALTER TABLE eval_summary ADD COLUMN ratio_metric VARCHAR;
ALTER TABLE eval_summary ADD COLUMN mean_reward DOUBLE;
ALTER TABLE eval_summary ADD COLUMN mean_reward_ci_low DOUBLE;
ALTER TABLE eval_summary ADD COLUMN mean_reward_ci_high DOUBLE;

DROP VIEW IF EXISTS leaderboard;
DROP TABLE harmony_evaluation;
DROP TABLE chic_evaluation;
DROP TABLE rltaps_evaluation;

-- Harmony's evaluation per (evaluation, arrival pattern, scheduler), as migration 0010
-- defined it: paired_ratio is the ratio to the pattern's best baseline, paired by sequence.

-- Chic's evaluation per (evaluation, system, arrival rate), as migration 0011 defined it.

-- RL-TAPS' evaluation per (evaluation, scheduler, job-sequence set), as migration 0012
-- defined it: mean slowdown (eq. 17) and mean reward (G_1) with 95% half-widths.

-- The leaderboard across families (migrations 0018, 0019), now from eval_summary only.

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
