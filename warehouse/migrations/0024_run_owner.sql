-- A run records the process that runs it (host, pid and that process's start time), so a
-- later start can tell a run whose process is gone (killed, the machine rebooted) from one
-- still running beside it, and mark the first `interrupted` (pipelines/stages.py,
-- start_run). The status check gains that value: DuckDB cannot alter a CHECK constraint,
-- so the table is rebuilt (nothing references it).
CREATE TABLE pipeline_runs_new (
    run_id          VARCHAR   NOT NULL PRIMARY KEY,
    flow            VARCHAR   NOT NULL,
    started_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP,
    status          VARCHAR   NOT NULL
        CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
    seed            BIGINT    NOT NULL,
    config          VARCHAR   NOT NULL,
    code_version    VARCHAR   NOT NULL,
    summary         VARCHAR,
    host            VARCHAR,
    pid             BIGINT,
    process_started VARCHAR
);
INSERT INTO pipeline_runs_new
SELECT run_id, flow, started_at, finished_at, status, seed, config, code_version, summary,
       NULL, NULL, NULL
FROM pipeline_runs;
DROP TABLE pipeline_runs;
ALTER TABLE pipeline_runs_new RENAME TO pipeline_runs;
