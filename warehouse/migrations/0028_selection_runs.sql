-- Where an evaluation's best heuristic is chosen: the baselines' runs on held-out
-- validation sequences (pipelines.evaluation.EvalConfig.choose_on), the same columns as
-- eval_runs, kept apart so that nothing reading eval_runs mixes them with the runs every
-- ratio is taken on. eval_summary says which split chose the best heuristic.
CREATE TABLE eval_selection_runs (
    run_id          VARCHAR NOT NULL PRIMARY KEY,
    eval_id         VARCHAR NOT NULL,
    scheduler       VARCHAR NOT NULL,
    policy          VARCHAR NOT NULL,
    workload_set    VARCHAR NOT NULL,
    workload_id     VARCHAR NOT NULL,
    split           VARCHAR NOT NULL CHECK (split IN ('train', 'validation', 'test')),
    sequence_no     INTEGER NOT NULL CHECK (sequence_no >= 0),
    replicate       INTEGER NOT NULL CHECK (replicate >= 0),
    seed            BIGINT  NOT NULL,
    n_jobs          INTEGER NOT NULL CHECK (n_jobs >= 1),
    avg_jct_s       DOUBLE  NOT NULL CHECK (avg_jct_s > 0),
    median_jct_s    DOUBLE  NOT NULL CHECK (median_jct_s > 0),
    p95_jct_s       DOUBLE  NOT NULL CHECK (p95_jct_s > 0),
    makespan_s      DOUBLE  NOT NULL CHECK (makespan_s > 0),
    mean_slowdown   DOUBLE  NOT NULL CHECK (mean_slowdown > 0),
    gpu_time_s      DOUBLE  NOT NULL CHECK (gpu_time_s >= 0),
    utilization     DOUBLE  NOT NULL CHECK (utilization >= 0 AND utilization <= 1),
    trace_version   VARCHAR NOT NULL,
    config          VARCHAR NOT NULL,
    code_version    VARCHAR NOT NULL,
    reward          DOUBLE,
    UNIQUE (eval_id, scheduler, workload_id, replicate)
);

ALTER TABLE eval_summary ADD COLUMN best_heuristic_chosen_on VARCHAR;
