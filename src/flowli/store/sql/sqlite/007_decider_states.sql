-- flowli schema for SQLite, version 7: the state of each execution of a decider, stored beside
-- the execution and advanced in the write of each command, fenced by its version (compare and
-- set), so that a command is applied once and never replays the journal.
CREATE TABLE decider_states (
    eid TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    state TEXT NOT NULL
)
