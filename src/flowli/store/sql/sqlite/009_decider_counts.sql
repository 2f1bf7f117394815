-- flowli schema for SQLite, version 9: what keeps a filtered page of a decider's executions at the
-- cost of its answer. The count of the rows of each label (a page's total without a scan), and
-- each row's tags one to a row (a tag filter reads the rows that have the tag), both kept by
-- triggers in the transaction that writes the row. The tags of a row, as a JSON array, beside
-- the form a text filter reads.
ALTER TABLE decider_states ADD COLUMN tag_list TEXT;
CREATE TABLE decider_labels (
    decider TEXT NOT NULL,
    application TEXT NOT NULL,
    label TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (decider, application, label)
) WITHOUT ROWID;
CREATE TABLE decider_tags (
    decider TEXT NOT NULL,
    application TEXT NOT NULL,
    tag TEXT NOT NULL,
    eid TEXT NOT NULL,
    number INTEGER,
    created_at REAL,
    PRIMARY KEY (decider, application, tag, eid)
);
-- a tag's rows in the order a page shows them (its number, then its start)
CREATE INDEX decider_tags_page ON decider_tags (decider, application, tag, number, created_at, eid);
CREATE INDEX decider_tags_eid ON decider_tags (eid);
INSERT INTO decider_labels (decider, application, label, n)
    SELECT decider, COALESCE(application, ''), COALESCE(label, ''), COUNT(*) FROM decider_states
    WHERE decider IS NOT NULL GROUP BY 1, 2, 3;
WITH RECURSIVE split (eid, decider, application, number, created_at, rest, tag) AS (
    SELECT eid, decider, COALESCE(application, ''), number, created_at, substr(tags, 2), NULL FROM decider_states
    WHERE decider IS NOT NULL AND tags IS NOT NULL
    UNION ALL
    SELECT eid, decider, application, number, created_at, substr(rest, instr(rest, char(10)) + 1),
        substr(rest, 1, instr(rest, char(10)) - 1)
    FROM split WHERE instr(rest, char(10)) > 0
)
INSERT INTO decider_tags (decider, application, tag, eid, number, created_at)
    SELECT decider, application, tag, eid, number, created_at FROM split WHERE tag IS NOT NULL ON CONFLICT DO NOTHING;
CREATE TRIGGER decider_states_counted AFTER INSERT ON decider_states WHEN new.decider IS NOT NULL
BEGIN
    INSERT INTO decider_labels (decider, application, label, n)
        VALUES (new.decider, COALESCE(new.application, ''), COALESCE(new.label, ''), 1)
        ON CONFLICT (decider, application, label) DO UPDATE SET n = n + 1;
    INSERT INTO decider_tags (decider, application, tag, eid, number, created_at)
        SELECT new.decider, COALESCE(new.application, ''), value, new.eid, new.number, new.created_at
        FROM json_each(COALESCE(new.tag_list, '[]')) WHERE true ON CONFLICT DO NOTHING;
END;
CREATE TRIGGER decider_states_relabelled AFTER UPDATE OF decider, application, label ON decider_states
    WHEN old.decider IS NOT new.decider OR old.application IS NOT new.application OR old.label IS NOT new.label
BEGIN
    UPDATE decider_labels SET n = n - 1
        WHERE decider = old.decider AND application = COALESCE(old.application, '') AND label = COALESCE(old.label, '');
    INSERT INTO decider_labels (decider, application, label, n)
        SELECT new.decider, COALESCE(new.application, ''), COALESCE(new.label, ''), 1 WHERE new.decider IS NOT NULL
        ON CONFLICT (decider, application, label) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER decider_states_retagged AFTER UPDATE OF decider, application, tag_list, number, created_at
    ON decider_states
    WHEN old.decider IS NOT new.decider OR old.application IS NOT new.application OR old.tag_list IS NOT new.tag_list
        OR old.number IS NOT new.number OR old.created_at IS NOT new.created_at
BEGIN
    DELETE FROM decider_tags WHERE eid = old.eid;
    INSERT INTO decider_tags (decider, application, tag, eid, number, created_at)
        SELECT new.decider, COALESCE(new.application, ''), value, new.eid, new.number, new.created_at
        FROM json_each(COALESCE(new.tag_list, '[]')) WHERE new.decider IS NOT NULL ON CONFLICT DO NOTHING;
END;
CREATE TRIGGER decider_states_uncounted AFTER DELETE ON decider_states WHEN old.decider IS NOT NULL
BEGIN
    UPDATE decider_labels SET n = n - 1
        WHERE decider = old.decider AND application = COALESCE(old.application, '') AND label = COALESCE(old.label, '');
    DELETE FROM decider_tags WHERE eid = old.eid;
END;
