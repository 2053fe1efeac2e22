-- Evaluation of schedulers on test workloads (pipelines/evaluation.py; contracts in
-- pipelines/contracts.py). One evaluation (eval_id: a hash of its config and of the
-- workloads' content) is a set of runs, one per (scheduler, workload, seed); re-running the
-- same evaluation replaces its rows in all three tables, in one transaction.

-- One simulator run, with its own metrics (the per-run level of the summary: paired
-- comparisons between schedulers join on (eval_id, workload_id, replicate)).
CREATE TABLE eval_runs (
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
    UNIQUE (eval_id, scheduler, workload_id, replicate)
);

-- Every job of every run.
CREATE TABLE eval_jobs (
    run_id       VARCHAR NOT NULL,
    eval_id      VARCHAR NOT NULL,
    scheduler    VARCHAR NOT NULL,
    workload_id  VARCHAR NOT NULL,
    seed         BIGINT  NOT NULL,
    job_index    INTEGER NOT NULL CHECK (job_index >= 0),
    job_id       VARCHAR NOT NULL,
    model        VARCHAR NOT NULL,
    arrival_s    DOUBLE  NOT NULL CHECK (arrival_s >= 0),
    start_s      DOUBLE  NOT NULL,
    finish_s     DOUBLE  NOT NULL,
    jct_s        DOUBLE  NOT NULL CHECK (jct_s > 0),
    ideal_s      DOUBLE  NOT NULL CHECK (ideal_s > 0),
    slowdown     DOUBLE  NOT NULL CHECK (slowdown > 0),
    gpu_time_s   DOUBLE  NOT NULL CHECK (gpu_time_s >= 0),
    PRIMARY KEY (run_id, job_index),
    CHECK (start_s >= arrival_s AND finish_s >= start_s)
);

-- Per (evaluation, workload set, scheduler): each metric's mean over the runs (seeds x test
-- sequences) with a Student-t confidence interval beside it (NULL when n_runs = 1), and the
-- average JCT relative to a reference scheduler, paired by workload and seed.
CREATE TABLE eval_summary (
    eval_id                VARCHAR NOT NULL,
    workload_set           VARCHAR NOT NULL,
    scheduler              VARCHAR NOT NULL,
    policy                 VARCHAR NOT NULL,
    n_runs                 INTEGER NOT NULL CHECK (n_runs >= 1),
    n_sequences            INTEGER NOT NULL CHECK (n_sequences >= 1),
    n_seeds                INTEGER NOT NULL CHECK (n_seeds >= 1),
    n_jobs                 BIGINT  NOT NULL CHECK (n_jobs >= 1),
    confidence             DOUBLE  NOT NULL CHECK (confidence > 0 AND confidence < 1),
    avg_jct_s              DOUBLE  NOT NULL CHECK (avg_jct_s > 0),
    avg_jct_ci_low         DOUBLE,
    avg_jct_ci_high        DOUBLE,
    avg_jct_slots          DOUBLE  NOT NULL CHECK (avg_jct_slots > 0),
    median_jct_s           DOUBLE  NOT NULL CHECK (median_jct_s > 0),
    median_jct_ci_low      DOUBLE,
    median_jct_ci_high     DOUBLE,
    p95_jct_s              DOUBLE  NOT NULL CHECK (p95_jct_s > 0),
    p95_jct_ci_low         DOUBLE,
    p95_jct_ci_high        DOUBLE,
    makespan_s             DOUBLE  NOT NULL CHECK (makespan_s > 0),
    makespan_ci_low        DOUBLE,
    makespan_ci_high       DOUBLE,
    mean_slowdown          DOUBLE  NOT NULL CHECK (mean_slowdown > 0),
    mean_slowdown_ci_low   DOUBLE,
    mean_slowdown_ci_high  DOUBLE,
    utilization            DOUBLE  NOT NULL CHECK (utilization >= 0 AND utilization <= 1),
    utilization_ci_low     DOUBLE,
    utilization_ci_high    DOUBLE,
    reference              VARCHAR NOT NULL,
    jct_ratio              DOUBLE  NOT NULL CHECK (jct_ratio > 0),
    jct_ratio_ci_low       DOUBLE,
    jct_ratio_ci_high      DOUBLE,
    config                 VARCHAR NOT NULL,
    code_version           VARCHAR NOT NULL,
    PRIMARY KEY (eval_id, workload_set, scheduler),
    CHECK (avg_jct_ci_low IS NULL OR (avg_jct_ci_low <= avg_jct_s AND avg_jct_s <= avg_jct_ci_high))
);
