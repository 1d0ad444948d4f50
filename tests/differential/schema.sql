-- The tables and rows every corpus query reads, loaded into Sluice and
-- PostgreSQL alike. Sluice's tables without a primary key get three
-- partitions (the harness adds WITH (partitions = 3)).
CREATE TABLE n1 (k INT, a TEXT);
CREATE TABLE n2 (k INT, b TEXT);
CREATE TABLE n3 (a TEXT, k INT, c BIGINT);
INSERT INTO n1 VALUES (1, 'x'), (2, 'y'), (NULL, 'z'), (3, NULL);
INSERT INTO n2 VALUES (1, 'p'), (NULL, 'q'), (3, 'r'), (3, 's');
INSERT INTO n3 VALUES ('x', 1, 10), ('w', 4, 40), (NULL, NULL, NULL);
CREATE TABLE t (
    id INT NOT NULL,
    i SMALLINT,
    n INT,
    b BIGINT,
    r REAL,
    x DOUBLE PRECISION,
    y NUMERIC(12,3),
    s TEXT,
    v VARCHAR(5),
    flag BOOLEAN,
    d DATE,
    ts TIMESTAMP,
    tz TIMESTAMPTZ,
    j JSONB,
    raw BYTEA
);
INSERT INTO t VALUES
    (1, 1, 10, 100, 1.5, 1.25, 2.5, 'alpha', 'ab', true, '2026-01-01', '2026-01-01 10:00:00', '2026-01-01 10:00:00+00', '{"a": 1, "b": [1, 2]}', '\x0102'),
    (2, -7, -3, 9223372036854775807, -0.5, 2.5, 3.125, 'Beta', 'bcd', false, '2025-12-31', '2025-12-31 23:59:59.5', '2025-12-31 23:00:00+02', '[1, "x", null]', '\xff'),
    (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (4, 32767, 2147483647, -9223372036854775807, 3.25e10, -1e-7, -99.999, 'O''Brien', 'x', true, '2000-02-29', '2000-02-29 12:34:56.789', '2000-02-29 12:34:56.789+05:30', '{"a": {"c": "d"}, "e": true}', '\x'),
    (5, 0, 0, 0, 0, 0, 0, '', '', false, '1970-01-01', '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', '{}', '\x00'),
    (6, 100, 42, 42, 2.5, 2.5, 2.5, 'a b c', 'abc', true, '2026-03-15', '2026-03-15 08:00:00', '2026-03-15 08:00:00+00', '"str"', '\x41'),
    (7, 100, 42, 43, 0.1, 0.1, 0.1, 'mañana', 'ñ', NULL, '2024-06-30', '2024-06-30 18:30:00', '2024-06-30 18:30:00-07', 'null', '\x4142');
CREATE TABLE kv (k INT PRIMARY KEY, v TEXT, n BIGINT);
INSERT INTO kv VALUES (1, 'one', 1), (2, 'two', 2), (3, NULL, NULL), (4, 'four', 4);
-- Tables for name binding, NULL logic, joins and subqueries (PostgreSQL's
-- regression topics subselect, join, rowtypes, select_distinct): the same
-- column names in several tables, NULLs in every column.
CREATE TABLE abc (a INT, b INT, c INT);
INSERT INTO abc VALUES (1, 10, 100), (2, 20, 200), (3, 30, 300), (NULL, NULL, NULL);
CREATE TABLE l (la INT, lb INT);
CREATE TABLE r (ra INT, rb INT);
INSERT INTO l VALUES (1, 10), (2, 20), (3, NULL);
INSERT INTO r VALUES (1, 100), (3, NULL), (4, 400);
CREATE TABLE t1 (f1 INT, f2 INT);
CREATE TABLE t2 (f1 INT, f2 INT);
INSERT INTO t1 VALUES (1, 2), (3, 4);
INSERT INTO t2 VALUES (3, 4), (5, 6);
CREATE TABLE xyz (x INT, y INT, z TEXT);
INSERT INTO xyz VALUES (1, 1, 'a'), (1, 2, 'b'), (2, 1, 'c'), (NULL, 3, 'd'), (2, NULL, NULL);
CREATE TABLE orders (id INT, status TEXT, amount NUMERIC(10,2));
INSERT INTO orders VALUES (1, 'paid', 50.00), (2, 'paid', 120.50), (3, 'cancelled', 30.00),
    (4, 'cancelled', NULL), (5, 'paid', 80.25), (6, 'open', NULL), (7, 'cancelled', 75.00);
CREATE TABLE ivals (id INT, v INTERVAL);
INSERT INTO ivals VALUES (1, '24 hours'), (2, '1 day'), (3, '1 mon'), (4, '30 days'), (5, NULL), (6, '1 day');
CREATE TABLE typmods (id INT, t TIMESTAMP(0), tz TIMESTAMPTZ(2), i INTERVAL HOUR TO MINUTE, j INTERVAL(1), k INTERVAL YEAR);
INSERT INTO typmods VALUES (1, '2003-04-12 04:05:06.666', '2003-04-12 04:05:06.666+00', '1 day 2 hours 3 minutes 4.5 seconds', '1.26 seconds', '2 years 5 months'),
    (2, '1960-01-01 00:00:00.5', '2026-01-01 10:00:00.125+02', '-1.5 hours', '-0.05 seconds', '-1 year -11 months'), (3, NULL, NULL, NULL, NULL, NULL);
INSERT INTO typmods SELECT id + 10, t + INTERVAL '0.5 second', tz, i + INTERVAL '30 seconds', j, k FROM typmods WHERE id < 3;
CREATE TABLE chars (id INT, c CHAR(3), v CHARACTER(2) NOT NULL, d CHAR);
INSERT INTO chars VALUES (1, 'a', 'b', 'x'), (2, 'abc', 'xy', NULL), (3, 'ab   ', 'q ', 'y '), (4, NULL, '', 'z');
INSERT INTO chars SELECT id + 10, c, v, 'w' FROM chars WHERE id < 3;
