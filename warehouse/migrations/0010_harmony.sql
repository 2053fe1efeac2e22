-- Harmony (papers/harmony.txt): reward-predictor accuracy, training curves of its predictor
-- and placement policies, and its evaluation against the placement baselines. Contracts in
-- models/harmony/contracts.py (tests/test_contracts.py checks they agree with this DDL).
-- Harmony's trained networks are rows of `policies` (systems harmony-reward-model, harmony,
-- harmony-without-critic, harmony-without-exploration, harmony-without-replay).

-- Mean relative error |predicted - measured| / measured speed of each estimator on the same
-- split of interference sample sets (paper Fig. 9): overall (job_type 'all') and per job type.
-- reward_model_id: the registered predictor these rows were measured with; source: the
-- samples' `interference_samples.source` (synthetic, gavel:<gpu>, harmony-online, ...).
CREATE TABLE reward_model_metrics (
    reward_model_id     VARCHAR NOT NULL REFERENCES policies (policy_id),
    source              VARCHAR NOT NULL CHECK (length(source) > 0),
    estimator           VARCHAR NOT NULL
        CHECK (estimator IN ('harmony-nn', 'lif-line', 'lif-quad', 'gradient-boosting')),
    split               VARCHAR NOT NULL CHECK (split IN ('train', 'test')),
    job_type            VARCHAR NOT NULL CHECK (length(job_type) > 0),
    n_samples           INTEGER NOT NULL CHECK (n_samples >= 1),
    mean_relative_error DOUBLE  NOT NULL CHECK (mean_relative_error >= 0),
    seed                BIGINT  NOT NULL,
    code_version        VARCHAR NOT NULL,
    PRIMARY KEY (reward_model_id, source, estimator, split, job_type)
);

-- Training curves: per epoch of the reward predictor (phase 'reward_model': train loss,
-- held-out relative error) and per validation point of a placement policy (phase
-- 'placement': mean interval reward, entropy, losses, exploration, validation JCT in the
-- predictor's simulator).
CREATE TABLE harmony_learning_curves (
    policy_id      VARCHAR NOT NULL REFERENCES policies (policy_id),
    phase          VARCHAR NOT NULL CHECK (phase IN ('reward_model', 'placement')),
    step           INTEGER NOT NULL CHECK (step >= 0),
    episodes       INTEGER CHECK (episodes >= 0),
    wall_s         DOUBLE  NOT NULL CHECK (wall_s >= 0),
    train_loss     DOUBLE  CHECK (train_loss >= 0),
    test_rel_error DOUBLE  CHECK (test_rel_error >= 0),
    reward         DOUBLE,
    entropy        DOUBLE  CHECK (entropy >= 0),
    policy_loss    DOUBLE,
    value_loss     DOUBLE  CHECK (value_loss >= 0),
    epsilon        DOUBLE  CHECK (epsilon >= 0 AND epsilon <= 1),
    entropy_weight DOUBLE  CHECK (entropy_weight >= 0),
    val_avg_jct_s  DOUBLE  CHECK (val_avg_jct_s > 0),
    PRIMARY KEY (policy_id, phase, step)
);

-- One row per (evaluation, arrival pattern, scheduler): Harmony, its ablations and the
-- baselines on the same job sequences in the simulator with the true speed model. avg_jct_s
-- is the mean over sequences of each run's average JCT, ci_* its Student-t 95% interval
-- (NULL with one sequence); improvement_over_best_baseline = 1 - avg_jct_s / the best
-- baseline's avg_jct_s under that pattern (positive: better than every baseline);
-- paired_ratio = mean over sequences of avg JCT / the best baseline's on the same sequence
-- (same jobs and seed), with its t-interval: the comparison to read, as the sequences' load
-- cancels out of it.
CREATE TABLE harmony_evaluation (
    eval_id                        VARCHAR   NOT NULL,
    pattern                        VARCHAR   NOT NULL
        CHECK (pattern IN ('uniform', 'poisson', 'google')),
    scheduler                      VARCHAR   NOT NULL CHECK (length(scheduler) > 0),
    policy_id                      VARCHAR   REFERENCES policies (policy_id),
    n_sequences                    INTEGER   NOT NULL CHECK (n_sequences >= 1),
    avg_jct_s                      DOUBLE    NOT NULL CHECK (avg_jct_s > 0),
    avg_jct_intervals              DOUBLE    NOT NULL CHECK (avg_jct_intervals > 0),
    ci_low_s                       DOUBLE,
    ci_high_s                      DOUBLE,
    best_baseline                  VARCHAR,
    improvement_over_best_baseline DOUBLE,
    paired_ratio                   DOUBLE    CHECK (paired_ratio > 0),
    paired_ratio_ci_low            DOUBLE,
    paired_ratio_ci_high           DOUBLE,
    eval_config                    VARCHAR   NOT NULL CHECK (eval_config LIKE '{%}'),
    seed                           BIGINT    NOT NULL,
    evaluated_at                   TIMESTAMP NOT NULL,
    code_version                   VARCHAR   NOT NULL,
    PRIMARY KEY (eval_id, pattern, scheduler),
    CHECK (ci_low_s IS NULL OR ci_low_s <= avg_jct_s),
    CHECK (ci_high_s IS NULL OR ci_high_s >= avg_jct_s)
);
