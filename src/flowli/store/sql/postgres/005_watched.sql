-- flowli schema for PostgreSQL, version 5: until when appends to an execution's journal notify the
-- other processes (a watch of that journal, ``engine.watch(eid)``, asks for it and renews it). A
-- writer's update of the execution's row returns it, so it costs no read; the watcher's update
-- of the same row serializes with the writers', so no append between the two is missed.
ALTER TABLE executions ADD COLUMN watched_until DOUBLE PRECISION;
