-- Every learned system's training curve in one long-format view: one row per (policy,
-- phase, step, metric). Each system writes its own wide table (columns that fit its
-- trainer); this view is what users and the report query. Later migrations extend it as
-- systems add their curve tables.

-- The views it reads or changes are defined once in warehouse/views/, applied after the
-- migrations.
