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
    PRIMARY KEY (decider, application, tag, eid)
) WITHOUT ROWID;
CREATE INDEX decider_tags_eid ON decider_tags (eid);
INSERT INTO decider_labels (decider, application, label, n)
    SELECT decider, COALESCE(application, ''), COALESCE(label, ''), COUNT(*) FROM decider_states
    WHERE decider IS NOT NULL GROUP BY 1, 2, 3;
WITH RECURSIVE split (eid, decider, application, rest, tag) AS (
    SELECT eid, decider, COALESCE(application, ''), substr(tags, 2), NULL FROM decider_states
    WHERE decider IS NOT NULL AND tags IS NOT NULL
    UNION ALL
    SELECT eid, decider, application, substr(rest, instr(rest, char(10)) + 1), substr(rest, 1, instr(rest, char(10)) - 1)
    FROM split WHERE instr(rest, char(10)) > 0
)
INSERT INTO decider_tags (decider, application, tag, eid)
    SELECT decider, application, tag, eid FROM split WHERE tag IS NOT NULL ON CONFLICT DO NOTHING;
CREATE TRIGGER decider_states_counted AFTER INSERT ON decider_states WHEN new.decider IS NOT NULL
BEGIN
    INSERT INTO decider_labels (decider, application, label, n)
        VALUES (new.decider, COALESCE(new.application, ''), COALESCE(new.label, ''), 1)
        ON CONFLICT (decider, application, label) DO UPDATE SET n = n + 1;
    INSERT INTO decider_tags (decider, application, tag, eid)
        SELECT new.decider, COALESCE(new.application, ''), value, new.eid FROM json_each(COALESCE(new.tag_list, '[]'))
        WHERE true ON CONFLICT DO NOTHING;
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
CREATE TRIGGER decider_states_retagged AFTER UPDATE OF decider, application, tag_list ON decider_states
    WHEN old.decider IS NOT new.decider OR old.application IS NOT new.application OR old.tag_list IS NOT new.tag_list
BEGIN
    DELETE FROM decider_tags WHERE eid = old.eid;
    INSERT INTO decider_tags (decider, application, tag, eid)
        SELECT new.decider, COALESCE(new.application, ''), value, new.eid FROM json_each(COALESCE(new.tag_list, '[]'))
        WHERE new.decider IS NOT NULL ON CONFLICT DO NOTHING;
END;
CREATE TRIGGER decider_states_uncounted AFTER DELETE ON decider_states WHEN old.decider IS NOT NULL
BEGIN
    UPDATE decider_labels SET n = n - 1
        WHERE decider = old.decider AND application = COALESCE(old.application, '') AND label = COALESCE(old.label, '');
    DELETE FROM decider_tags WHERE eid = old.eid;
END;
