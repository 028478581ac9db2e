-- keeper 0001: the registries of core.cloud and the audit trail, in the schema `keeper`.

-- Cloud-Provider: a cloud account. credentials_ref is a vault path; the secret is never stored here.
CREATE TABLE keeper.cloud_providers (
    name            text PRIMARY KEY,
    driver          text NOT NULL,
    credentials_ref text NOT NULL,
    region          text NOT NULL,
    fqdn_suffix     text,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Cloud-Profile: a VM spec on top of a provider. A provider that profiles depend on cannot be deleted.
CREATE TABLE keeper.cloud_profiles (
    name       text PRIMARY KEY,
    provider   text NOT NULL REFERENCES keeper.cloud_providers (name) ON DELETE RESTRICT,
    spec       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cloud_profiles_provider ON keeper.cloud_profiles (provider);

-- Souls: hosts keeper knows. created_by NULL marks a keeper-internal action (core.cloud).
-- A SID (the FQDN the provider returned) names at most one soul that is not destroyed.
CREATE TABLE keeper.souls (
    id           bigserial PRIMARY KEY,
    sid          text NOT NULL,
    status       text NOT NULL CHECK (status IN ('pending', 'active', 'destroyed')),
    provider     text NOT NULL,
    vm_id        text NOT NULL,
    primary_ip   text NOT NULL DEFAULT '',
    attributes   jsonb NOT NULL DEFAULT '{}',
    created_by   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz
);
CREATE UNIQUE INDEX souls_live_sid ON keeper.souls (sid) WHERE status <> 'destroyed';
CREATE INDEX souls_provider_vm ON keeper.souls (provider, vm_id);

-- Soul seeds: what other modules give a soul; orphaned when its soul is destroyed.
CREATE TABLE keeper.soul_seeds (
    id         bigserial PRIMARY KEY,
    soul_id    bigint NOT NULL REFERENCES keeper.souls (id) ON DELETE RESTRICT,
    name       text NOT NULL,
    status     text NOT NULL CHECK (status IN ('active', 'orphaned', 'retired')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX soul_seeds_soul ON keeper.soul_seeds (soul_id);

-- One-time bootstrap tokens: only the SHA-256 of the token is kept; the plain token cannot be
-- recovered from here.
CREATE TABLE keeper.bootstrap_tokens (
    id           bigserial PRIMARY KEY,
    soul_id      bigint NOT NULL REFERENCES keeper.souls (id) ON DELETE RESTRICT,
    token_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    status       text NOT NULL CHECK (status IN ('issued', 'used', 'burned')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    used_at      timestamptz,
    burned_at    timestamptz
);
CREATE INDEX bootstrap_tokens_soul ON keeper.bootstrap_tokens (soul_id);

-- The journal of VMs core.cloud asked a cloud for, written before each create: what was made is
-- never forgotten, even when the step fails or keeper stops half-way.
--   requested: about to be asked for; made: the cloud made it (vm_id known); recorded: its soul exists;
--   failed: the cloud made nothing; kept: made, the step failed and the VM could not be destroyed;
--   destroyed: gone (rolled back by a failed step, or by core.cloud.destroyed).
CREATE TABLE keeper.cloud_vms (
    id         bigserial PRIMARY KEY,
    step_id    text NOT NULL,
    provider   text NOT NULL,
    name       text NOT NULL,
    vm_id      text,
    sid        text,
    state      text NOT NULL CHECK (state IN ('requested', 'made', 'recorded', 'failed', 'kept', 'destroyed')),
    detail     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cloud_vms_step ON keeper.cloud_vms (step_id);
CREATE INDEX cloud_vms_vm ON keeper.cloud_vms (provider, vm_id);

-- The last index handed out per batch name: <name>-<index> is never used twice.
CREATE TABLE keeper.name_counters (
    base       text PRIMARY KEY,
    last_index bigint NOT NULL CHECK (last_index >= 0)
);

-- The audit trail: append-only.
CREATE TABLE keeper.audit_events (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    event   text NOT NULL,
    actor   text NOT NULL,
    outcome text NOT NULL,
    payload jsonb NOT NULL
);
CREATE INDEX audit_events_event ON keeper.audit_events (event, at);

CREATE FUNCTION keeper.audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'keeper.audit_events is append-only';
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON keeper.audit_events
    FOR EACH ROW EXECUTE FUNCTION keeper.audit_events_append_only();
