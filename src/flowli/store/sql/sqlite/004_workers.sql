-- flowli schema for SQLite, version 4: the workers that run (each renews its row while it runs),
-- so that a run can be told that no live worker serves its queue, or runs a version.
CREATE TABLE workers (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    queues     TEXT NOT NULL,
    workflows  TEXT,
    started_at REAL NOT NULL,
    seen_at    REAL NOT NULL
) WITHOUT ROWID
