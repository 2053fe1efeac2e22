-- DL2's searched teacher (issue 18; models/dl2/search.py): per recording, each model's
-- workers and PSs the search found on the training sequences' average JCT, beside Optimus'
-- configuration it started from and the training JCT before and after that model's step.
-- The recorder records this table as the teacher (`decision_traces` rows of the same
-- run_id); the warm-up rebuilds the teacher from it. Contract: models/contracts.py.
CREATE TABLE dl2_teacher_configs (
    run_id          VARCHAR NOT NULL,
    model           VARCHAR NOT NULL,
    jobs            INTEGER NOT NULL CHECK (jobs >= 1),
    start_workers   INTEGER NOT NULL CHECK (start_workers >= 1),
    start_ps        INTEGER NOT NULL CHECK (start_ps >= 1),
    workers         INTEGER NOT NULL CHECK (workers >= 1),
    ps              INTEGER NOT NULL CHECK (ps >= 1),
    start_avg_jct_s DOUBLE  NOT NULL CHECK (start_avg_jct_s > 0),
    found_avg_jct_s DOUBLE  NOT NULL CHECK (found_avg_jct_s > 0),
    evaluations     INTEGER NOT NULL CHECK (evaluations >= 0),
    code_version    VARCHAR NOT NULL,
    PRIMARY KEY (run_id, model),
    CHECK (found_avg_jct_s <= start_avg_jct_s)
);
