-- flowli schema for SQLite, version 11: the tasks whose time comes next, found without reading
-- the ready tasks that wait for a worker. The sweeper's expired leases read the leased ones
-- alone, and the next wake-up the first ready task due after now: both read every ready task
-- before (6 ms of each second with 10 000 pipeline stages waiting for a worker).
-- (the leased ones lead with the state, which their query names: an index of one more column it
-- constrains, which the planner prefers to tasks_due for it)
CREATE INDEX IF NOT EXISTS tasks_leased ON tasks (state, visible_at) WHERE state = 'ready' AND lease_owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_due ON tasks (visible_at) WHERE state = 'ready';
