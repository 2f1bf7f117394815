-- flowli schema for SQLite, version 10: the runs started in a window of time (the dashboard's
-- overview counts them by name and by interval without reading the executions before it).
CREATE INDEX IF NOT EXISTS executions_created ON executions (created_at);
