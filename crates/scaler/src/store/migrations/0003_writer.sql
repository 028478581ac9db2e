-- The record's writer id, the label value of every machine it creates ('': a record written before
-- writer ids, given one by its next pass).
ALTER TABLE orca_pool.records ADD COLUMN writer text NOT NULL DEFAULT '';
