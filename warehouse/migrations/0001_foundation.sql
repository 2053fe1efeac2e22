-- Foundation tables: trace sources, the normalized job log, quarantine, the model
-- catalogue, derived workloads and pipeline runs. Each table has a pandera contract
-- beside the code that writes it (tracelib/contracts.py, pipelines/contracts.py);
-- tests/test_contracts.py checks that this DDL and those contracts agree.

CREATE TABLE trace_sources (
    source_id        VARCHAR   NOT NULL PRIMARY KEY,
    format           VARCHAR   NOT NULL CHECK (format IN ('philly', 'pai', 'helios', 'generic', 'synthetic')),
    path             VARCHAR   NOT NULL,
    content_hash     VARCHAR   NOT NULL CHECK (length(content_hash) = 64),
    ingested_at      TIMESTAMP NOT NULL,
    rows_accepted    BIGINT    NOT NULL CHECK (rows_accepted >= 0),
    rows_quarantined BIGINT    NOT NULL CHECK (rows_quarantined >= 0),
    params           VARCHAR   NOT NULL,
    code_version     VARCHAR   NOT NULL
);

CREATE TABLE jobs (
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
    PRIMARY KEY (source_id, job_id),
    CHECK (start_time IS NULL OR start_time >= submit_time),
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time)
);

CREATE TABLE quarantine (
    source_id  VARCHAR NOT NULL,
    record_no  BIGINT  NOT NULL CHECK (record_no >= 1),
    field      VARCHAR NOT NULL,
    reason     VARCHAR NOT NULL,
    raw_record VARCHAR NOT NULL,
    PRIMARY KEY (source_id, record_no)
);

CREATE TABLE job_types (
    model            VARCHAR NOT NULL PRIMARY KEY,
    type_index       INTEGER NOT NULL UNIQUE CHECK (type_index >= 0),
    domain           VARCHAR NOT NULL,
    global_batch     INTEGER NOT NULL CHECK (global_batch > 0),
    iters_per_epoch  INTEGER NOT NULL CHECK (iters_per_epoch > 0),
    local_comp_s     DOUBLE  NOT NULL CHECK (local_comp_s > 0),
    model_size_mb    DOUBLE  NOT NULL CHECK (model_size_mb > 0),
    worker_gpu       DOUBLE  NOT NULL CHECK (worker_gpu >= 0),
    worker_cpu       DOUBLE  NOT NULL CHECK (worker_cpu >= 0),
    worker_mem_gb    DOUBLE  NOT NULL CHECK (worker_mem_gb >= 0),
    ps_cpu           DOUBLE  NOT NULL CHECK (ps_cpu >= 0),
    ps_mem_gb        DOUBLE  NOT NULL CHECK (ps_mem_gb >= 0),
    speed_a          DOUBLE  NOT NULL CHECK (speed_a >= 0),
    speed_b          DOUBLE  NOT NULL CHECK (speed_b >= 0),
    speed_c          DOUBLE  NOT NULL CHECK (speed_c >= 0),
    speed_d          DOUBLE  NOT NULL CHECK (speed_d >= 0),
    speed_e          DOUBLE  NOT NULL CHECK (speed_e >= 0),
    max_workers      INTEGER NOT NULL CHECK (max_workers >= 1)
);

CREATE TABLE workloads (
    workload_id   VARCHAR   NOT NULL PRIMARY KEY,
    derivation    VARCHAR   NOT NULL,
    split         VARCHAR   NOT NULL CHECK (split IN ('train', 'validation', 'test')),
    sequence_no   INTEGER   NOT NULL CHECK (sequence_no >= 0),
    source_ids    VARCHAR   NOT NULL,
    source_hashes VARCHAR   NOT NULL,
    n_jobs        INTEGER   NOT NULL CHECK (n_jobs >= 1),
    span_s        DOUBLE    NOT NULL CHECK (span_s >= 0),
    seed          BIGINT    NOT NULL,
    params        VARCHAR   NOT NULL,
    code_version  VARCHAR   NOT NULL,
    derived_at    TIMESTAMP NOT NULL,
    UNIQUE (derivation, split, sequence_no)
);

CREATE TABLE workload_jobs (
    workload_id  VARCHAR NOT NULL,
    job_index    INTEGER NOT NULL CHECK (job_index >= 0),
    source_id    VARCHAR NOT NULL,
    job_id       VARCHAR NOT NULL,
    model        VARCHAR NOT NULL,
    epochs       DOUBLE  NOT NULL CHECK (epochs > 0),
    num_workers  INTEGER NOT NULL CHECK (num_workers >= 1),
    num_ps       INTEGER NOT NULL CHECK (num_ps >= 0),
    num_gpus     DOUBLE  NOT NULL CHECK (num_gpus >= 0),
    arrival_s    DOUBLE  NOT NULL CHECK (arrival_s >= 0),
    arrival_slot INTEGER NOT NULL CHECK (arrival_slot >= 0),
    duration_s   DOUBLE  NOT NULL CHECK (duration_s > 0),
    PRIMARY KEY (workload_id, job_index)
);

CREATE TABLE pipeline_runs (
    run_id       VARCHAR   NOT NULL PRIMARY KEY,
    flow         VARCHAR   NOT NULL,
    started_at   TIMESTAMP NOT NULL,
    finished_at  TIMESTAMP,
    status       VARCHAR   NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    seed         BIGINT    NOT NULL,
    config       VARCHAR   NOT NULL,
    code_version VARCHAR   NOT NULL,
    summary      VARCHAR
);
