-- orca-pool's records, one per (kind, owner, pool), with every machine name it recorded.
CREATE TABLE orca_pool.records (
    kind         text NOT NULL,
    owner        text NOT NULL,
    pool         text NOT NULL,
    established  boolean NOT NULL DEFAULT false,
    next_number  bigint NOT NULL DEFAULT 0,
    -- Raised each time a replica takes the lead; every write checks it (fencing).
    epoch        bigint NOT NULL DEFAULT 0,
    leader       text NOT NULL DEFAULT '',
    leader_since timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, owner, pool)
);

CREATE TABLE orca_pool.machines (
    kind            text NOT NULL,
    owner           text NOT NULL,
    pool            text NOT NULL,
    name            text NOT NULL,
    machine_type    text NOT NULL,
    location        text NOT NULL,
    phase           text NOT NULL CHECK (phase IN ('creating', 'live', 'deleting', 'retired', 'gone')),
    machine_id      text,
    intent_at       timestamptz NOT NULL,
    created_at      timestamptz,
    unhealthy_since timestamptz,
    changed_at      timestamptz NOT NULL,
    note            text NOT NULL DEFAULT '',
    PRIMARY KEY (kind, owner, pool, name),
    FOREIGN KEY (kind, owner, pool) REFERENCES orca_pool.records ON DELETE CASCADE
);

CREATE TABLE orca_pool.cooling (
    kind     text NOT NULL,
    owner    text NOT NULL,
    pool     text NOT NULL,
    offering text NOT NULL,
    until    timestamptz NOT NULL,
    PRIMARY KEY (kind, owner, pool, offering),
    FOREIGN KEY (kind, owner, pool) REFERENCES orca_pool.records ON DELETE CASCADE
);

-- Every intent and outcome, written in the same transaction as the record it changed.
CREATE TABLE orca_pool.events (
    id      bigserial PRIMARY KEY,
    kind    text NOT NULL,
    owner   text NOT NULL,
    pool    text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    epoch   bigint NOT NULL,
    replica text NOT NULL,
    event   text NOT NULL,
    name    text,
    detail  text NOT NULL
);

CREATE INDEX events_by_pool ON orca_pool.events (kind, owner, pool, id);
