-- `policies` lists, for each table whose foreign key points at it, that table's name, and
-- DuckDB checks every table listed on each UPDATE of `policies`. 0009 renamed the DL2 curve
-- table (learning_curves -> dl2_learning_curves) and DuckDB kept the old name in that list;
-- once 0013 made `learning_curves` a view, every UPDATE of `policies` failed with
-- "learning_curves is not an table" (from the duckdb CLI too).
--
-- DuckDB has no ALTER TABLE ... DROP CONSTRAINT. Creating a table under the stale name with
-- the same foreign key and dropping it removes the stale entry; the DL2 curve table is then
-- rebuilt under its own name so `policies` lists it correctly.
DROP VIEW IF EXISTS learning_curves;
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

-- The view `learning_curves` comes back from its one definition (warehouse/views/), which
-- migrate() applies after the migrations.
