-- flowli schema for PostgreSQL, version 7: one word for the control-log append, "announce", in the
-- schema too: the lifecycle entries not yet on the control log are "unannounced".
ALTER TABLE unmirrored RENAME TO unannounced;
ALTER INDEX unmirrored_at RENAME TO unannounced_at;
