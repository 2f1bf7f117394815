-- flowli schema, version 1. Instants are UNIX seconds (REAL); JSON values are TEXT.

CREATE TABLE executions (
    eid              TEXT PRIMARY KEY,
    workflow         TEXT NOT NULL,
    version          TEXT NOT NULL,
    status           TEXT NOT NULL,
    args             TEXT NOT NULL,
    queue            TEXT NOT NULL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    result           TEXT,
    error            TEXT,
    parent_eid       TEXT,
    parent_fid       TEXT,
    key              TEXT,
    lease_owner      TEXT,
    lease_epoch      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    cancel_requested TEXT,
    blocked          TEXT,
    next_seq         INTEGER NOT NULL DEFAULT 1   -- the seq of the next journal entry
);
CREATE INDEX executions_running ON executions (lease_expires_at) WHERE status = 'running';
CREATE INDEX executions_finished ON executions (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');

-- lifecycle journal entries not yet appended to the control log (the second append)
CREATE TABLE unmirrored (
    eid TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at  REAL NOT NULL,
    PRIMARY KEY (eid, seq)
) WITHOUT ROWID;
CREATE INDEX unmirrored_at ON unmirrored (at);

CREATE TABLE journal (
    eid        TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    fid        TEXT,
    attempt    INTEGER,
    digest     TEXT,
    value      TEXT,
    error      TEXT,
    provenance TEXT NOT NULL,
    PRIMARY KEY (eid, seq)
) WITHOUT ROWID;

-- control-log seqs come from one counter row: its lock orders the appends of concurrent
-- transactions, so a reader that has seen seq n never finds a lower seq committed later
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    n    INTEGER NOT NULL
);
INSERT INTO counters (name, n) VALUES ('control_log', 0);

CREATE TABLE control_log (
    seq         INTEGER PRIMARY KEY,  -- from counters: commit order is seq order
    eid         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    fid         TEXT,
    attempt     INTEGER,
    digest      TEXT,
    value       TEXT,
    error       TEXT,
    provenance  TEXT NOT NULL,
    journal_seq INTEGER
);
CREATE UNIQUE INDEX control_log_mirror ON control_log (eid, journal_seq) WHERE journal_seq IS NOT NULL;

CREATE TABLE tasks (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    queue       TEXT NOT NULL,
    eid         TEXT,
    payload     TEXT,
    provenance  TEXT NOT NULL,
    visible_at  REAL NOT NULL,
    deliveries  INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    state       TEXT NOT NULL DEFAULT 'ready'  -- ready, acked, withdrawn
);
CREATE INDEX tasks_ready ON tasks (queue, visible_at) WHERE state = 'ready';
CREATE INDEX tasks_eid ON tasks (eid);

CREATE TABLE channels (
    name     TEXT PRIMARY KEY,
    next_seq INTEGER NOT NULL  -- the sequence number of the next message
) WITHOUT ROWID;

CREATE TABLE messages (
    channel    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    payload    TEXT,
    provenance TEXT NOT NULL,
    PRIMARY KEY (channel, seq)
) WITHOUT ROWID;

CREATE TABLE timers (
    eid TEXT NOT NULL,
    fid TEXT NOT NULL,
    at  REAL NOT NULL,
    PRIMARY KEY (eid, fid)
) WITHOUT ROWID;
CREATE INDEX timers_at ON timers (at);

CREATE TABLE waiters (
    channel TEXT NOT NULL,
    eid     TEXT NOT NULL,
    PRIMARY KEY (channel, eid)
) WITHOUT ROWID;

CREATE TABLE claims (
    key   TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    at    REAL NOT NULL
) WITHOUT ROWID;
