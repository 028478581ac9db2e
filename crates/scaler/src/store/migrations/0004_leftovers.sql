-- A create of this name may have left pieces beside its machine that no listing shows: removed by
-- name before the name is pruned (false: nothing to remove, and every row written before).
ALTER TABLE orca_pool.machines ADD COLUMN leftovers boolean NOT NULL DEFAULT false;
