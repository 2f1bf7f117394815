-- flowli schema for PostgreSQL, version 9: the state of each execution of a decider, stored
-- beside the execution and advanced in the write of each command, fenced by its version
-- (compare and set), so that a command is applied once and never replays the journal.
CREATE TABLE decider_states (
    eid TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    state TEXT NOT NULL
);
