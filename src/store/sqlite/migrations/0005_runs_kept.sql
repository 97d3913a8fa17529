-- Runs are never deleted, as records are not: their events name them without a foreign key.
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
BEGIN SELECT RAISE(ABORT, 'runs are never deleted'); END;
