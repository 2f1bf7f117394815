-- flowli schema for PostgreSQL, version 8: items, the named records of the layers above the
-- engine (applications, API keys, users, pipeline and stage ids, policies, schedules, worker
-- sessions), each of a kind, in an application ('' for none), unique by key, with a numeric id.
CREATE TABLE items (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    application TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    UNIQUE (kind, application, key)
);
CREATE INDEX items_key ON items (kind, key);
CREATE INDEX items_list ON items (kind, application, id);
