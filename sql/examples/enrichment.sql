-- Enrichment: usage events joined to a table of tenants (their plan and
-- price) into an hourly bill per tenant. The bill follows the tenants
-- table: changing a tenant's price re-derives that tenant's bill, and
-- deleting a tenant removes its bill.
--
-- Run with psql against a server: psql -h 127.0.0.1 -p 5455 -f sql/examples/enrichment.sql
-- It also runs after the README's first example, whose usage rows then
-- join in too.

CREATE TABLE IF NOT EXISTS usage (
    event_id   TEXT,
    tenant     TEXT,
    tokens     BIGINT,
    event_time TIMESTAMP
) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant');

-- One row per tenant; a new row for a tenant replaces the old one.
CREATE TABLE tenants (
    tenant             TEXT PRIMARY KEY,
    plan               TEXT,
    price_per_1k_cents BIGINT
);

-- The bill: tokens and cost per tenant and hour, at the tenant's current
-- price.
CREATE MATERIALIZED VIEW hourly_bill AS
    SELECT u.tenant,
           t.plan,
           date_trunc('hour', u.event_time) AS hour,
           SUM(u.tokens) AS tokens,
           SUM(u.tokens * t.price_per_1k_cents) / 1000 AS cost_cents
    FROM usage u
    JOIN tenants t ON u.tenant = t.tenant
    GROUP BY u.tenant, t.plan, date_trunc('hour', u.event_time);

-- Usage of tenants the tenants table does not know: nothing is billed
-- for them, so someone should look.
CREATE MATERIALIZED VIEW unbilled AS
    SELECT u.tenant, COUNT(*) AS events, SUM(u.tokens) AS tokens
    FROM usage u
    WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.tenant = u.tenant)
    GROUP BY u.tenant;

-- load
INSERT INTO tenants VALUES
    ('acme',    'pro',  200),
    ('globex',  'free',  50),
    ('initech', 'pro',  200);

INSERT INTO usage VALUES
    ('e1', 'acme',    1000, '2026-11-30 10:05:00'),
    ('e2', 'acme',    3000, '2026-11-30 10:40:00'),
    ('e3', 'globex',  2000, '2026-11-30 10:15:00'),
    ('e4', 'initech', 5000, '2026-11-30 11:02:00'),
    ('e5', 'acme',    2000, '2026-11-30 11:30:00'),
    ('e6', 'hooli',    700, '2026-11-30 11:45:00');

FLUSH;
SELECT * FROM hourly_bill ORDER BY tenant, hour;
SELECT * FROM unbilled;

-- change
-- acme moves to the enterprise price: its bill is re-derived.
UPDATE tenants SET plan = 'enterprise', price_per_1k_cents = 150 WHERE tenant = 'acme';
-- initech leaves: its bill goes, and its usage shows as unbilled.
DELETE FROM tenants WHERE tenant = 'initech';
-- hooli signs up: its usage is billed from now on, past events included.
INSERT INTO tenants VALUES ('hooli', 'free', 50);

FLUSH;
SELECT * FROM hourly_bill ORDER BY tenant, hour;
SELECT * FROM unbilled;
