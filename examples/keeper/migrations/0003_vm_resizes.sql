-- The journal of resizes: one row for each running VM a core.cloud.resized step resizes, written
-- before the driver may stop it, so that a VM that a stopped keeper left stopped half-way through
-- its resize is started again by the reconciler.
--   resizing: asked for (the VM may be stopped); done: it ended with the VM running, or gone;
--   started: the reconciler found it stopped and started it.
CREATE TABLE keeper.vm_resizes (
    id           bigserial PRIMARY KEY,
    step_id      text NOT NULL,
    provider     text NOT NULL,
    vm_id        text NOT NULL,
    machine_type text NOT NULL,
    state        text NOT NULL CHECK (state IN ('resizing', 'done', 'started')),
    detail       text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX vm_resizes_resizing ON keeper.vm_resizes (step_id) WHERE state = 'resizing';
