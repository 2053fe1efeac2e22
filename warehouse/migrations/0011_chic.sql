-- Chic and Chic-Pair (models/chic): per-iteration learning curves of the cross-entropy
-- method and the evaluation against Optimus per arrival rate. Contracts in
-- models/chic/contracts.py (tests/test_contracts.py checks they agree with this DDL).

-- One row per CEM iteration of a registered Chic / Chic-Pair policy: the elite bound xi_k,
-- the mean and best return of the N + 1 sampled trajectories, how many were elite and
-- whether the uniform trajectory was among them, the loss of the elite fit, and every
-- val_every iterations the validation ACT (seconds) of the policy at that iteration.
CREATE TABLE chic_learning_curves (
    policy_id     VARCHAR NOT NULL REFERENCES policies (policy_id),
    iteration     INTEGER NOT NULL CHECK (iteration >= 1),
    elite_bound   DOUBLE  NOT NULL,
    mean_return   DOUBLE  NOT NULL,
    best_return   DOUBLE  NOT NULL,
    n_elite       INTEGER NOT NULL CHECK (n_elite >= 0),
    uniform_elite BOOLEAN NOT NULL,
    fit_loss      DOUBLE  CHECK (fit_loss >= 0),
    val_act_s     DOUBLE  CHECK (val_act_s > 0),
    steps         BIGINT  NOT NULL CHECK (steps >= 0),
    wall_s        DOUBLE  NOT NULL CHECK (wall_s >= 0),
    PRIMARY KEY (policy_id, iteration),
    CHECK (best_return >= elite_bound AND best_return >= mean_return)
);

-- One row per system and arrival rate of one evaluation (eval_id): average completion
-- time over n_sequences unseen sequences (seeds listed), its 95% confidence half-width,
-- the policy evaluated (NULL for Optimus), and the ACT reduction against Optimus at 600 s
-- on the same sequences (1 - avg_jct_s / Optimus-600's; the paper's targets: Chic >= 12.65%,
-- Chic-Pair >= 10.08% at every rate).
CREATE TABLE chic_evaluation (
    eval_id              VARCHAR   NOT NULL,
    system               VARCHAR   NOT NULL
        CHECK (regexp_full_match(system, '(chic|chic-pair)(-trained-at-[0-9.]+)?|optimus-[0-9]+')),
    rate_per_hour        DOUBLE    NOT NULL CHECK (rate_per_hour > 0),
    avg_jct_s            DOUBLE    NOT NULL CHECK (avg_jct_s > 0),
    ci95_s               DOUBLE    NOT NULL CHECK (ci95_s >= 0),
    n_sequences          INTEGER   NOT NULL CHECK (n_sequences >= 1),
    policy_id            VARCHAR   REFERENCES policies (policy_id),
    improvement_vs_optimus_600 DOUBLE NOT NULL,
    sequence_seeds       VARCHAR   NOT NULL CHECK (sequence_seeds LIKE '[%]'),
    config               VARCHAR   NOT NULL CHECK (config LIKE '{%}'),
    seed                 BIGINT    NOT NULL,
    code_version         VARCHAR   NOT NULL,
    evaluated_at         TIMESTAMP NOT NULL,
    PRIMARY KEY (eval_id, system, rate_per_hour),
    CHECK ((policy_id IS NULL) = starts_with(system, 'optimus-'))
);
