-- flowli schema for SQLite, version 3: the tenant of executions, tasks and messages (None for
-- single-tenant use; a child inherits its parent's), and the frame attempt that a task runs
-- (its number, and the frame's data for a DELEGATE attempt: frame id, policy, lease expiries).
ALTER TABLE executions ADD COLUMN application TEXT;
ALTER TABLE tasks ADD COLUMN application TEXT;
ALTER TABLE tasks ADD COLUMN attempt INTEGER;
ALTER TABLE tasks ADD COLUMN frame TEXT;
ALTER TABLE messages ADD COLUMN application TEXT
