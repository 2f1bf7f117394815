-- flowli schema for SQLite, version 8: the index of each decider state, written with the state in
-- the write of each command (the read model of lists and inboxes: a list reads a page of rows,
-- never a journal). A start writes its row at version 0, before its first command. And an
-- index of the executions not ended by the instant their record last changed (stuck runs).
ALTER TABLE decider_states ADD COLUMN decider TEXT;
ALTER TABLE decider_states ADD COLUMN application TEXT;
ALTER TABLE decider_states ADD COLUMN created_at REAL;
ALTER TABLE decider_states ADD COLUMN number INTEGER;
ALTER TABLE decider_states ADD COLUMN label TEXT;
ALTER TABLE decider_states ADD COLUMN name TEXT;
ALTER TABLE decider_states ADD COLUMN tags TEXT;
ALTER TABLE decider_states ADD COLUMN text TEXT;
ALTER TABLE decider_states ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
-- covering: a filter on tags or text scans this index, never the rows (whose state is large)
CREATE INDEX decider_states_list ON decider_states (decider, application, number, created_at, label, name, tags,
    text, waiting);
CREATE INDEX decider_states_name ON decider_states (decider, application, name, number, created_at);
CREATE INDEX decider_states_label ON decider_states (decider, application, label, number, created_at);
CREATE INDEX decider_states_waiting ON decider_states (decider, application) WHERE waiting > 0;
-- the candidates of stuck runs (executions not ended, by the instant their record last changed)
CREATE INDEX executions_open ON executions (updated_at) WHERE status IN ('pending', 'running', 'suspended');
