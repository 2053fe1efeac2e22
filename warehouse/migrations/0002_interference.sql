-- Interference samples: per-job training speeds measured with jobs co-located on a
-- saturated cluster (Harmony section VI.A), written by tracelib.interference; contract
-- tracelib.contracts.InterferenceSamples. One row per job per sample set; the jobs of a set
-- share (source, seed, sample_set). worker_servers / ps_servers are JSON arrays of the job's
-- worker / PS count on each of the n_servers servers (Harmony's placement matrix d).

CREATE TABLE interference_samples (
    source          VARCHAR NOT NULL CHECK (length(source) > 0),
    seed            BIGINT  NOT NULL,
    sample_set      INTEGER NOT NULL CHECK (sample_set >= 0),
    job_in_set      INTEGER NOT NULL CHECK (job_in_set >= 0),
    model           VARCHAR NOT NULL CHECK (length(model) > 0),
    type_index      INTEGER NOT NULL CHECK (type_index >= 0),
    workers         INTEGER NOT NULL CHECK (workers >= 1),
    ps              INTEGER NOT NULL CHECK (ps >= 0),
    n_servers       INTEGER NOT NULL CHECK (n_servers >= 1),
    worker_servers  VARCHAR NOT NULL CHECK (worker_servers LIKE '[%]'),
    ps_servers      VARCHAR NOT NULL CHECK (ps_servers LIKE '[%]'),
    servers_used    INTEGER NOT NULL CHECK (servers_used >= 1),
    colocated_tasks INTEGER NOT NULL CHECK (colocated_tasks >= 0),
    colocated_jobs  INTEGER NOT NULL CHECK (colocated_jobs >= 0),
    isolated_speed  DOUBLE  NOT NULL CHECK (isolated_speed > 0),
    measured_speed  DOUBLE  NOT NULL CHECK (measured_speed > 0),
    slowdown        DOUBLE  NOT NULL CHECK (slowdown < 1),
    params          VARCHAR NOT NULL,
    code_version    VARCHAR NOT NULL,
    PRIMARY KEY (source, seed, sample_set, job_in_set),
    CHECK (servers_used <= workers + ps),
    CHECK (colocated_jobs <= colocated_tasks)
);
