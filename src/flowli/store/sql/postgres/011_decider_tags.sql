-- flowli schema for PostgreSQL, version 11: each decider state's tags one to a row, kept by a
-- trigger in the transaction that writes the state, so that a tag filter reads the rows that have
-- the tag (its count too). The tags of a row, as a JSON array, beside the form a text filter reads.
-- (The count of each label is not kept here: on PostgreSQL the writers run in parallel, and a row
-- of counts that every command of an application moves would make them wait on each other.)
ALTER TABLE decider_states ADD COLUMN tag_list TEXT;
CREATE TABLE decider_tags (
    decider TEXT NOT NULL,
    application TEXT NOT NULL,
    tag TEXT NOT NULL,
    eid TEXT NOT NULL,
    number BIGINT,
    created_at DOUBLE PRECISION,
    PRIMARY KEY (decider, application, tag, eid)
);
-- a tag's rows in the order a page shows them (its number, then its start)
CREATE INDEX decider_tags_page ON decider_tags (decider, application, tag, number, created_at, eid);
CREATE INDEX decider_tags_eid ON decider_tags (eid);
INSERT INTO decider_tags (decider, application, tag, eid, number, created_at)
    SELECT d.decider, COALESCE(d.application, ''), t, d.eid, d.number, d.created_at
    FROM decider_states d, unnest(string_to_array(trim(both E'\n' from d.tags), E'\n')) AS t
    WHERE d.decider IS NOT NULL AND d.tags IS NOT NULL AND t <> ''
    ON CONFLICT DO NOTHING;
CREATE FUNCTION flowli_decider_tags() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND (OLD.tag_list IS DISTINCT FROM NEW.tag_list
            OR OLD.decider IS DISTINCT FROM NEW.decider OR OLD.application IS DISTINCT FROM NEW.application
            OR OLD.number IS DISTINCT FROM NEW.number OR OLD.created_at IS DISTINCT FROM NEW.created_at)) THEN
        DELETE FROM decider_tags WHERE eid = OLD.eid;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.decider IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.tag_list IS DISTINCT FROM NEW.tag_list
            OR OLD.decider IS DISTINCT FROM NEW.decider OR OLD.application IS DISTINCT FROM NEW.application
            OR OLD.number IS DISTINCT FROM NEW.number OR OLD.created_at IS DISTINCT FROM NEW.created_at) THEN
        INSERT INTO decider_tags (decider, application, tag, eid, number, created_at)
            SELECT NEW.decider, COALESCE(NEW.application, ''), t, NEW.eid, NEW.number, NEW.created_at
            FROM jsonb_array_elements_text(COALESCE(NEW.tag_list, '[]')::jsonb) AS t
            ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER decider_states_tags AFTER INSERT OR UPDATE OR DELETE ON decider_states
    FOR EACH ROW EXECUTE FUNCTION flowli_decider_tags();
