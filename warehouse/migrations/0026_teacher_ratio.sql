-- What a learned policy adds over what it imitated or searched with: its teacher (a
-- scheduler of the same evaluation) and its paired ratio to it, with the interval, where
-- the teacher ran on the same workload set (`pipelines.evaluation.summarize_runs`).
ALTER TABLE eval_summary ADD COLUMN teacher VARCHAR;
ALTER TABLE eval_summary ADD COLUMN ratio_to_teacher DOUBLE;
ALTER TABLE eval_summary ADD COLUMN teacher_ci_low DOUBLE;
ALTER TABLE eval_summary ADD COLUMN teacher_ci_high DOUBLE;
