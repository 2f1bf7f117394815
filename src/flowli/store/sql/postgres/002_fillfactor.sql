-- flowli schema for PostgreSQL, version 2: room on each page of the rows updated at every step,
-- so that an update that changes no indexed column stays on its page (a HOT update: no new index
-- entries, less WAL). Applies to pages written from now on.
ALTER TABLE executions SET (fillfactor = 70);
ALTER TABLE tasks SET (fillfactor = 70);
