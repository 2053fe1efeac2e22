-- Fidelity checks of the simulator's ground truth against measurements and published
-- figures (models/fidelity.py; contract: pipelines/contracts.py FidelityChecks). One row
-- per check per computation; `check_key` hashes what the checks depend on (their config,
-- the code version and the measurement file), so an unchanged simulator is checked once.
CREATE TABLE fidelity_checks (
    check_key    VARCHAR   NOT NULL,
    check_name   VARCHAR   NOT NULL,
    source       VARCHAR   NOT NULL,
    measured     DOUBLE,
    low          DOUBLE    NOT NULL,
    high         DOUBLE    NOT NULL,
    passed       BOOLEAN   NOT NULL,
    run_id       VARCHAR   NOT NULL,
    code_version VARCHAR   NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (check_key, check_name),
    CHECK (low <= high)
);
