-- job_types holds every catalogue the simulator runs: DL2's parameter-server models and
-- RL-TAPS' all-reduce CNNs (tracelib.catalogue.CATALOGUES). Each numbers its types from 0,
-- so the key becomes (catalogue, model) and type_index is unique per catalogue. Rows of the
-- old table are DL2's.

CREATE TABLE job_types_by_catalogue (
    catalogue        VARCHAR NOT NULL CHECK (catalogue IN ('dl2', 'rl-taps')),
    model            VARCHAR NOT NULL,
    type_index       INTEGER NOT NULL CHECK (type_index >= 0),
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
    max_workers      INTEGER NOT NULL CHECK (max_workers >= 1),
    PRIMARY KEY (catalogue, model),
    UNIQUE (catalogue, type_index)
);

INSERT INTO job_types_by_catalogue SELECT 'dl2', * FROM job_types;
DROP TABLE job_types;
ALTER TABLE job_types_by_catalogue RENAME TO job_types;
