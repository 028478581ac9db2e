-- The orca pool each VM was asked for in: keeper's VMs stay its own when the `pool` setting changes
-- (a VM made in pool `keeper` is destroyed, resized and reconciled in `keeper` after the setting
-- names another). Rows written before this column carry NULL: made in the pool keeper is set to.
ALTER TABLE keeper.cloud_vms ADD COLUMN pool text;
