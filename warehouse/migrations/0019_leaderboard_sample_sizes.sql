-- The leaderboard shows each evaluation's sample size beside the largest one's:
-- `latest` picks each workload set's newest evaluation, so a small ad-hoc `schedlab
-- evaluate` (1 seed, 1 sequence) after the nightly run would otherwise hide the nightly's
-- larger sample. Every row now says how many runs the largest evaluation of the same set
-- and scheduler has and which it is (`largest_n_runs`, `largest_eval_id`), and whether this
-- row's evaluation is smaller (`smaller_than_largest`).

DROP VIEW IF EXISTS leaderboard;

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
