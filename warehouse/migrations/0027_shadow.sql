-- Shadow mode: a closed day of the shadow spool is a trace source of format 'shadow'
-- (tracelib/shadow/trace.py), and `shadow_decisions` pairs each decision the shadowed
-- policy would have made with what the real scheduler did (contract:
-- pipelines/contracts.py ShadowDecisions; writer: pipelines/shadow_ingest.py).
--
-- DuckDB cannot alter a CHECK constraint: `trace_sources` is rebuilt with 'shadow' among its
-- formats (nothing references it; the `leaderboard` view reading it is dropped here and
-- comes back from its one definition in warehouse/views/ after the migrations).
DROP VIEW IF EXISTS leaderboard;
CREATE TABLE trace_sources_new (
    source_id        VARCHAR   NOT NULL PRIMARY KEY,
    format           VARCHAR   NOT NULL
        CHECK (format IN ('philly', 'pai', 'helios', 'generic', 'synthetic', 'shadow')),
    path             VARCHAR   NOT NULL,
    content_hash     VARCHAR   NOT NULL CHECK (length(content_hash) = 64),
    ingested_at      TIMESTAMP NOT NULL,
    rows_accepted    BIGINT    NOT NULL CHECK (rows_accepted >= 0),
    rows_quarantined BIGINT    NOT NULL CHECK (rows_quarantined >= 0),
    params           VARCHAR   NOT NULL,
    code_version     VARCHAR   NOT NULL
);
INSERT INTO trace_sources_new SELECT * FROM trace_sources;
DROP TABLE trace_sources;
ALTER TABLE trace_sources_new RENAME TO trace_sources;

CREATE TABLE shadow_decisions (
    source_id       VARCHAR   NOT NULL,
    decision_id     VARCHAR   NOT NULL CHECK (length(decision_id) = 32),
    job_id          VARCHAR   NOT NULL CHECK (length(job_id) >= 1),
    cluster         VARCHAR   NOT NULL,
    snapshot_time   TIMESTAMP NOT NULL,
    policy          VARCHAR   NOT NULL,
    policy_id       VARCHAR   NOT NULL,
    latency_ms      DOUBLE    NOT NULL CHECK (latency_ms >= 0),
    requested_gpus  DOUBLE    NOT NULL CHECK (requested_gpus > 0),
    policy_start    BOOLEAN   NOT NULL,
    policy_gpus     DOUBLE    CHECK (policy_gpus >= 0),
    policy_servers  VARCHAR,
    real_started    BOOLEAN   NOT NULL,
    real_start_time TIMESTAMP,
    real_gpus       DOUBLE    CHECK (real_gpus >= 0),
    real_servers    VARCHAR,
    same_action     BOOLEAN   NOT NULL,
    same_servers    BOOLEAN,
    PRIMARY KEY (decision_id, job_id),
    CHECK (starts_with(source_id, 'shadow:')),
    CHECK (same_action = (policy_start = real_started))
);
