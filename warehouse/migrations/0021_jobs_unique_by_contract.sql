-- Ingest speed (issue 19): `jobs` loses its PRIMARY KEY (source_id, job_id). Building and
-- storing that index was 0.6-0.7 s of a million-row ingest's 2 s of DuckDB work (the rows
-- themselves take about 0.9 s). The guarantee stays, checked before anything is written:
-- the `jobs` contract refuses a frame that holds a (source_id, job_id) twice (pandera, in
-- polars), and jobs are written only by `warehouse.replace_rows`, which refuses a row
-- outside the rows it replaces, so a source's jobs are always replaced as a whole (a job
-- cannot meet a stored copy of itself). Every other column, NOT NULL and CHECK is as
-- before. DuckDB cannot drop a primary key in place: the table is rebuilt and its rows
-- copied (no view reads `jobs`).

CREATE TABLE jobs_unkeyed (
    source_id    VARCHAR   NOT NULL,
    job_id       VARCHAR   NOT NULL,
    submit_time  TIMESTAMP NOT NULL,
    start_time   TIMESTAMP,
    end_time     TIMESTAMP,
    duration_s   DOUBLE    CHECK (duration_s >= 0),
    num_gpus     DOUBLE    NOT NULL CHECK (num_gpus >= 0),
    num_cpus     DOUBLE    CHECK (num_cpus >= 0),
    mem_gb       DOUBLE    CHECK (mem_gb >= 0),
    num_workers  INTEGER   CHECK (num_workers >= 0),
    num_ps       INTEGER   CHECK (num_ps >= 0),
    epochs       DOUBLE    CHECK (epochs > 0),
    status       VARCHAR   NOT NULL CHECK (status IN ('completed', 'failed', 'killed', 'running', 'pending', 'unknown')),
    user_name    VARCHAR,
    vc           VARCHAR,
    model        VARCHAR,
    gpu_type     VARCHAR,
    CHECK (start_time IS NULL OR start_time >= submit_time),
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time)
);

INSERT INTO jobs_unkeyed SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_unkeyed RENAME TO jobs;
