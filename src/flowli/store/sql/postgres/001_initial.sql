-- flowli schema for PostgreSQL, version 1. Instants are UNIX seconds (double precision), as in
-- the SQLite schema, so both share one codec; JSON values are text.

CREATE TABLE executions (
    eid              TEXT PRIMARY KEY,
    workflow         TEXT NOT NULL,
    version          TEXT NOT NULL,
    status           TEXT NOT NULL,
    args             TEXT NOT NULL,
    queue            TEXT NOT NULL,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    result           TEXT,
    error            TEXT,
    parent_eid       TEXT,
    parent_fid       TEXT,
    key              TEXT,
    lease_owner      TEXT,
    lease_epoch      BIGINT NOT NULL DEFAULT 0,
    lease_expires_at DOUBLE PRECISION,
    cancel_requested TEXT,
    blocked          TEXT,
    next_seq         BIGINT NOT NULL DEFAULT 1   -- the seq of the next journal entry
);
CREATE INDEX executions_running ON executions (lease_expires_at) WHERE status = 'running';
CREATE INDEX executions_finished ON executions (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');

-- lifecycle journal entries not yet appended to the control log (the second append)
CREATE TABLE unmirrored (
    eid TEXT NOT NULL,
    seq BIGINT NOT NULL,
    at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (eid, seq)
);
CREATE INDEX unmirrored_at ON unmirrored (at);

CREATE TABLE journal (
    eid        TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    fid        TEXT,
    attempt    BIGINT,
    digest     TEXT,
    value      TEXT,
    error      TEXT,
    provenance TEXT NOT NULL,
    PRIMARY KEY (eid, seq)
);

-- control-log seqs come from one counter row: its lock orders the appends of concurrent
-- transactions, so a reader that has seen seq n never finds a lower seq committed later
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    n    BIGINT NOT NULL
);
INSERT INTO counters (name, n) VALUES ('control_log', 0);

CREATE TABLE control_log (
    seq         BIGINT PRIMARY KEY,  -- from counters: commit order is seq order
    eid         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    fid         TEXT,
    attempt     BIGINT,
    digest      TEXT,
    value       TEXT,
    error       TEXT,
    provenance  TEXT NOT NULL,
    journal_seq BIGINT
);
CREATE UNIQUE INDEX control_log_mirror ON control_log (eid, journal_seq) WHERE journal_seq IS NOT NULL;

CREATE TABLE tasks (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    queue       TEXT NOT NULL,
    eid         TEXT,
    payload     TEXT,
    provenance  TEXT NOT NULL,
    visible_at  DOUBLE PRECISION NOT NULL,
    deliveries  BIGINT NOT NULL DEFAULT 0,
    lease_owner TEXT,
    state       TEXT NOT NULL DEFAULT 'ready'  -- ready, acked, withdrawn
);
CREATE INDEX tasks_ready ON tasks (queue, visible_at) WHERE state = 'ready';
CREATE INDEX tasks_eid ON tasks (eid);

CREATE TABLE channels (
    name     TEXT COLLATE "C" PRIMARY KEY,  -- "C": the range of an execution's channels is bytewise
    next_seq BIGINT NOT NULL  -- the sequence number of the next message
);

CREATE TABLE messages (
    channel    TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    payload    TEXT,
    provenance TEXT NOT NULL,
    PRIMARY KEY (channel, seq)
);

CREATE TABLE timers (
    eid TEXT NOT NULL,
    fid TEXT NOT NULL,
    at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (eid, fid)
);
CREATE INDEX timers_at ON timers (at);

CREATE TABLE waiters (
    channel TEXT NOT NULL,
    eid     TEXT NOT NULL,
    PRIMARY KEY (channel, eid)
);

CREATE TABLE claims (
    key   TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    at    DOUBLE PRECISION NOT NULL
);
