-- flowli schema for SQLite, version 5: one word for the control-log append, "announce", in the
-- schema too: the lifecycle entries not yet on the control log are "unannounced".
ALTER TABLE unmirrored RENAME TO unannounced;
DROP INDEX unmirrored_at;
CREATE INDEX unannounced_at ON unannounced (at)
