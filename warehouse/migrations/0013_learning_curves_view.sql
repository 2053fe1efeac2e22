-- Every learned system's training curve in one long-format view: one row per (policy,
-- phase, step, metric). Each system writes its own wide table (columns that fit its
-- trainer); this view is what users and the report query. Later migrations extend it as
-- systems add their curve tables.
CREATE VIEW learning_curves AS
SELECT p.system, u.policy_id, u.phase, u.step, u.episodes, u.metric, u.value
FROM (
    UNPIVOT (
        SELECT policy_id, phase, step, episodes, train_loss, val_loss, val_accuracy,
               val_avg_jct_s, reward, entropy, policy_loss, value_loss
        FROM dl2_learning_curves
    )
    ON train_loss, val_loss, val_accuracy, val_avg_jct_s, reward, entropy, policy_loss,
       value_loss
    INTO NAME metric VALUE value
) u
JOIN policies p USING (policy_id);
