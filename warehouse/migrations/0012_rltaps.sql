-- RL-TAPS (models/rltaps/): learning curves of its registered policies (systems 'rl-taps'
-- and 'rl-taps-streaming' in `policies`) and its evaluation against the job pickers.
-- Contracts in models/rltaps/contracts.py (tests/test_contracts.py checks they agree).

-- One row per training epoch (iteration 0: before training): the greedy policy's mean
-- reward (first return G_1, RL-TAPS eq. 16) and mean slowdown (eq. 17) on the validation
-- job sequences (comma-separated generator seeds), the sampled training episodes' figures,
-- the mean per-GPU policy entropy and the REINFORCE surrogate loss.
CREATE TABLE rltaps_learning_curves (
    policy_id      VARCHAR NOT NULL REFERENCES policies (policy_id)
                   CHECK (length(policy_id) > 0),
    iteration      INTEGER NOT NULL CHECK (iteration >= 0),
    mode           VARCHAR NOT NULL CHECK (mode IN ('nonstreaming', 'streaming')),
    updates        INTEGER NOT NULL CHECK (updates >= 0),
    episodes       INTEGER NOT NULL CHECK (episodes >= 0),
    wall_s         DOUBLE  NOT NULL CHECK (wall_s >= 0),
    train_reward   DOUBLE,
    train_slowdown DOUBLE  CHECK (train_slowdown > 0),
    val_reward     DOUBLE  NOT NULL,
    val_slowdown   DOUBLE  NOT NULL CHECK (val_slowdown > 0),
    entropy        DOUBLE  CHECK (entropy >= 0),
    loss           DOUBLE,
    val_seeds      VARCHAR NOT NULL CHECK (regexp_full_match(val_seeds, '[0-9]+(,[0-9]+)*')),
    PRIMARY KEY (policy_id, iteration)
);

-- One row per scheduler x job-sequence set: RL-TAPS trained in each mode (its policy id)
-- and the Random, SJF and Tetris job pickers with first-fit GPUs (no policy id), all in the
-- same topology-aware environment; means over the set's sequences with 95% CI half-widths;
-- `seeds` lists the bimodal generator seeds of the sequences (JSON), `config` the stage's.
CREATE TABLE rltaps_evaluation (
    run_id        VARCHAR NOT NULL CHECK (length(run_id) > 0),
    scheduler     VARCHAR NOT NULL CHECK (scheduler IN ('rl-taps-nonstreaming',
                  'rl-taps-streaming', 'random', 'sjf', 'tetris')),
    sequence_set  VARCHAR NOT NULL CHECK (length(sequence_set) > 0),
    n_sequences   INTEGER NOT NULL CHECK (n_sequences >= 1),
    n_jobs        INTEGER NOT NULL CHECK (n_jobs >= 1),
    mean_reward   DOUBLE  NOT NULL,
    reward_ci95   DOUBLE  NOT NULL CHECK (reward_ci95 >= 0),
    mean_slowdown DOUBLE  NOT NULL CHECK (mean_slowdown > 0),
    slowdown_ci95 DOUBLE  NOT NULL CHECK (slowdown_ci95 >= 0),
    policy_id     VARCHAR REFERENCES policies (policy_id),
    seeds         VARCHAR NOT NULL CHECK (seeds LIKE '[%]'),
    config        VARCHAR NOT NULL CHECK (config LIKE '{%}'),
    code_version  VARCHAR NOT NULL,
    PRIMARY KEY (run_id, scheduler, sequence_set),
    CHECK ((scheduler LIKE 'rl-taps%') = (policy_id IS NOT NULL))
);
