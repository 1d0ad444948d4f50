-- The tables the suite's views read. Sluice's tables without a primary
-- key get three partitions (the harness adds WITH (partitions = 3)).
CREATE TABLE ev (id INT, k TEXT, n BIGINT, x NUMERIC(12,3), ts TIMESTAMP);
CREATE TABLE n1 (k INT, a TEXT);
CREATE TABLE n2 (k INT, b TEXT);
CREATE TABLE kv (k INT PRIMARY KEY, grp TEXT, v INT, doc JSONB);
CREATE TABLE spans (id INT, d INTERVAL, t TIME);
CREATE TABLE bags (id INT, xs INT[], tags TEXT[]);
