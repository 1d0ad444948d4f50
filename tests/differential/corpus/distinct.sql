-- DISTINCT, DISTINCT ON, grouping and ordering by position, operator
-- precedence (PostgreSQL's regression topics select_distinct,
-- aggregates, interval).
SELECT DISTINCT ON (1) x FROM xyz ORDER BY 1;
SELECT DISTINCT ON (1) x, y FROM xyz ORDER BY 1, 2;
SELECT DISTINCT ON (x) x, z FROM xyz ORDER BY x, z;
SELECT x, count(*) FROM xyz GROUP BY 1 ORDER BY 1;
SELECT count(DISTINCT a.*) FROM abc a;
SELECT count(DISTINCT (a.a, a.b)) FROM abc a;
SELECT count(DISTINCT x.*) FROM xyz x;
SELECT count(*) FROM (SELECT DISTINCT v FROM ivals) q;
SELECT count(*), min(id), max(id) FROM ivals GROUP BY v;
SELECT count(DISTINCT v) FROM ivals;
SELECT count(*) FROM (SELECT v FROM ivals WHERE id = 1 UNION SELECT v FROM ivals WHERE id = 2) q;
SELECT count(*) FROM (SELECT v FROM ivals WHERE id = 1 INTERSECT SELECT v FROM ivals WHERE id = 2) q;
SELECT count(*) FROM (SELECT v FROM ivals WHERE id = 1 EXCEPT SELECT v FROM ivals WHERE id = 2) q;
SELECT count(*) FROM (SELECT DISTINCT ON (v) id FROM ivals) q;
SELECT a.id, b.id FROM ivals a JOIN ivals b ON a.v = b.v WHERE a.id < b.id;
SELECT id FROM ivals WHERE v IN (SELECT v FROM ivals WHERE id = 1);
SELECT id FROM ivals WHERE v = ANY (SELECT v FROM ivals WHERE id = 3);
SELECT count(*) FROM (SELECT DISTINCT v, id % 2 FROM ivals) q;
SELECT 1 isnull, 1 notnull, NULL isnull;
SELECT ~1 + 1, -2 ^ 2, 2 + 3 * 4, - 2 * 3;
SELECT 2 ^ 3 ^ 2;
SELECT NOT true = false;
