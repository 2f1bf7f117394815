-- flowli schema for SQLite, version 2: the waits of an execution found by its eid. A resumed or
-- ended execution clears its waits by eid, which the primary key (channel, eid) does not lead
-- with: without this index each clear read every wait of every execution.
CREATE INDEX waiters_eid ON waiters (eid)
