-- Another writer owns machines in the pool under this owner: why, as told to the operator (NULL: none).
ALTER TABLE orca_pool.records ADD COLUMN conflict text;
