-- Learned schedulers: decision logs for supervised warm-up, the registry of trained
-- policies every learned system shares, and training curves. Contracts in
-- models/contracts.py (tests/test_contracts.py checks they agree with this DDL).

-- One inference step of a heuristic's decision replayed as DL2 actions (models/dl2/recorder.py):
-- the encoded observation before the step (the first n_jobs rows of the J x n_features
-- matrix of tracelib.envs.observation.encode_allocation, row-major; rows past n_jobs are
-- zero), the valid actions (worker/PS/both of each of the n_jobs jobs, then stop) and the
-- action taken, an index into DL2's 3J + 1 actions (3 * row + kind, stop = 3J).
CREATE TABLE decision_traces (
    run_id        VARCHAR   NOT NULL,
    workload_id   VARCHAR   NOT NULL,
    teacher       VARCHAR   NOT NULL CHECK (length(teacher) > 0),
    seed          BIGINT    NOT NULL,
    decision      INTEGER   NOT NULL CHECK (decision >= 0),
    step          INTEGER   NOT NULL CHECK (step >= 0),
    time_s        DOUBLE    NOT NULL CHECK (time_s >= 0),
    n_jobs        INTEGER   NOT NULL CHECK (n_jobs >= 1),
    obs_window    INTEGER   NOT NULL CHECK (obs_window >= 1),
    n_features    INTEGER   NOT NULL CHECK (n_features >= 1),
    observation   FLOAT[]   NOT NULL,
    mask          BOOLEAN[] NOT NULL,
    action        INTEGER   NOT NULL CHECK (action >= 0),
    kind          VARCHAR   NOT NULL CHECK (kind IN ('worker', 'ps', 'both', 'stop')),
    job_index     INTEGER   CHECK (job_index >= 0),
    obs_config    VARCHAR   NOT NULL CHECK (obs_config LIKE '{%}'),
    trace_version VARCHAR   NOT NULL,
    code_version  VARCHAR   NOT NULL,
    PRIMARY KEY (run_id, workload_id, teacher, seed, decision, step),
    CHECK (n_jobs <= obs_window),
    CHECK (len(observation) = n_jobs * n_features),
    CHECK (len(mask) = 3 * n_jobs + 1),
    CHECK ((kind = 'stop') = (action = 3 * obs_window)),
    CHECK ((kind = 'stop') = (job_index IS NULL)),
    CHECK (kind = 'stop' OR (action // 3 < n_jobs
           AND kind = ['worker', 'ps', 'both'][action % 3 + 1])),
    CHECK (CASE WHEN kind = 'stop' THEN mask[3 * n_jobs + 1] ELSE mask[action + 1] END)
);

-- Every trained policy of every learned system: its config, lineage (a fine-tuned policy's
-- parent is its warm-up), training workloads, metrics and the checkpoint file with its
-- sha256 (loading verifies it: models/checkpoints.py).
CREATE TABLE policies (
    policy_id          VARCHAR   NOT NULL PRIMARY KEY CHECK (length(policy_id) > 0),
    system             VARCHAR   NOT NULL CHECK (regexp_full_match(system, '[a-z0-9][a-z0-9-]*')),
    config             VARCHAR   NOT NULL CHECK (config LIKE '{%}'),
    parent_policy_id   VARCHAR   REFERENCES policies (policy_id),
    training_workloads VARCHAR   NOT NULL CHECK (training_workloads LIKE '[%]'),
    metrics            VARCHAR   NOT NULL CHECK (metrics LIKE '{%}'),
    checkpoint_path    VARCHAR   NOT NULL CHECK (length(checkpoint_path) > 0),
    sha256             VARCHAR   NOT NULL CHECK (regexp_full_match(sha256, '[0-9a-f]{64}')),
    created_at         TIMESTAMP NOT NULL,
    code_version       VARCHAR   NOT NULL,
    CHECK (parent_policy_id IS NULL OR parent_policy_id <> policy_id)
);

-- Training curves: per warm-up epoch (losses, imitation accuracy) and per RL validation
-- point (validation average JCT, mean slot reward, policy entropy, losses since the last row).
CREATE TABLE learning_curves (
    policy_id     VARCHAR NOT NULL REFERENCES policies (policy_id),
    phase         VARCHAR NOT NULL CHECK (phase IN ('warmup', 'finetune')),
    step          INTEGER NOT NULL CHECK (step >= 0),
    episodes      INTEGER CHECK (episodes >= 0),
    wall_s        DOUBLE  NOT NULL CHECK (wall_s >= 0),
    train_loss    DOUBLE  CHECK (train_loss >= 0),
    val_loss      DOUBLE  CHECK (val_loss >= 0),
    val_accuracy  DOUBLE  CHECK (val_accuracy >= 0 AND val_accuracy <= 1),
    val_avg_jct_s DOUBLE  CHECK (val_avg_jct_s > 0),
    reward        DOUBLE,
    entropy       DOUBLE  CHECK (entropy >= 0),
    policy_loss   DOUBLE,
    value_loss    DOUBLE  CHECK (value_loss >= 0),
    PRIMARY KEY (policy_id, phase, step)
);
