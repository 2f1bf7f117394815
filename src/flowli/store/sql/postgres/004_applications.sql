-- flowli schema for PostgreSQL, version 4: the tenant of executions, tasks and messages (NULL for
-- single-tenant use; a child inherits its parent's), and the frame attempt that a task runs
-- (its number, and the frame's data for a DELEGATE attempt: frame id, policy, lease expiries).
-- Columns without a default: each ALTER changes the catalog only, not the rows.
ALTER TABLE executions ADD COLUMN application TEXT;
ALTER TABLE tasks ADD COLUMN application TEXT;
ALTER TABLE tasks ADD COLUMN attempt BIGINT;
ALTER TABLE tasks ADD COLUMN frame TEXT;
ALTER TABLE messages ADD COLUMN application TEXT;
