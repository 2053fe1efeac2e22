-- `policies` lists, for each table whose foreign key points at it, that table's name, and
-- DuckDB checks every table listed on each UPDATE of `policies`. 0009 renamed the DL2 curve
-- table (learning_curves -> dl2_learning_curves) and DuckDB kept the old name in that list;
-- once 0013 made `learning_curves` a view, every UPDATE of `policies` failed with
-- "learning_curves is not an table" (from the duckdb CLI too).
--
-- DuckDB has no ALTER TABLE ... DROP CONSTRAINT. Creating a table under the stale name with
-- the same foreign key and dropping it removes the stale entry; the DL2 curve table is then
-- rebuilt under its own name so `policies` lists it correctly, and the view put back.
DROP VIEW learning_curves;
CREATE TABLE learning_curves (policy_id VARCHAR REFERENCES policies (policy_id));
DROP TABLE learning_curves;

CREATE TABLE dl2_learning_curves_copy AS SELECT * FROM dl2_learning_curves;
DROP TABLE dl2_learning_curves;
CREATE TABLE dl2_learning_curves (
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
INSERT INTO dl2_learning_curves SELECT * FROM dl2_learning_curves_copy;
DROP TABLE dl2_learning_curves_copy;

CREATE VIEW learning_curves AS
WITH long AS (
    -- DL2: warm-up epochs and RL validation points.
    SELECT policy_id, phase, step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, phase, step, episodes, train_loss, val_loss, val_accuracy,
                   val_avg_jct_s, reward, entropy, policy_loss, value_loss
            FROM dl2_learning_curves
        )
        ON train_loss, val_loss, val_accuracy, val_avg_jct_s, reward, entropy, policy_loss,
           value_loss
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- Harmony: reward-predictor epochs and placement-DRL validation points.
    SELECT policy_id, phase, step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, phase, step, episodes, train_loss, test_rel_error, reward,
                   entropy, policy_loss, value_loss, epsilon, entropy_weight, val_avg_jct_s
            FROM harmony_learning_curves
        )
        ON train_loss, test_rel_error, reward, entropy, policy_loss, value_loss, epsilon,
           entropy_weight, val_avg_jct_s
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- Chic / Chic-Pair: one row per cross-entropy-method iteration.
    SELECT policy_id, 'cem' AS phase, iteration AS step, NULL::INTEGER AS episodes, metric,
           value
    FROM (
        UNPIVOT (
            SELECT policy_id, iteration, elite_bound, mean_return, best_return, fit_loss,
                   val_act_s, n_elite::DOUBLE AS n_elite
            FROM chic_learning_curves
        )
        ON elite_bound, mean_return, best_return, fit_loss, val_act_s, n_elite
        INTO NAME metric VALUE value
    )
    UNION ALL
    -- RL-TAPS: one row per REINFORCE iteration, phase = training mode.
    SELECT policy_id, mode AS phase, iteration AS step, episodes, metric, value
    FROM (
        UNPIVOT (
            SELECT policy_id, mode, iteration, episodes, train_reward, train_slowdown,
                   val_reward, val_slowdown, entropy, loss
            FROM rltaps_learning_curves
        )
        ON train_reward, train_slowdown, val_reward, val_slowdown, entropy, loss
        INTO NAME metric VALUE value
    )
)
SELECT p.system, l.policy_id, l.phase, l.step, l.episodes, l.metric, l.value
FROM long l
JOIN policies p USING (policy_id);
