-- Merged columns of USING and NATURAL joins, LATERAL per outer row,
-- set-returning functions in FROM (PostgreSQL's regression topics join,
-- select_distinct, with).
SELECT f1, f1 IS NULL FROM t1 FULL JOIN t2 USING (f1) ORDER BY 1;
SELECT f1, f1 IS NULL FROM t1 RIGHT JOIN t2 USING (f1) ORDER BY 1;
SELECT f1 FROM t1 LEFT JOIN t2 USING (f1) ORDER BY 1;
SELECT f1, t1.f2, t2.f2 FROM t1 FULL JOIN t2 USING (f1) WHERE f1 > 2;
SELECT count(*) FROM t1 FULL JOIN t2 USING (f1) WHERE f1 IS NOT NULL;
SELECT f1 FROM t1 NATURAL FULL JOIN t2 ORDER BY f1;
SELECT * FROM t1 NATURAL RIGHT JOIN t2;
SELECT f1 + 1 FROM t1 RIGHT JOIN t2 USING (f1) GROUP BY f1 + 1 ORDER BY 1;
SELECT * FROM t1, LATERAL (SELECT t2.*, row_number() OVER () FROM t2 WHERE t1.f1 = t2.f1) s;
SELECT t1.f1, s.n FROM t1, LATERAL (SELECT count(*) AS n FROM t2 WHERE t2.f1 >= t1.f1) s;
SELECT t1.f1, s.* FROM t1, LATERAL (SELECT f2, rank() OVER (ORDER BY f2) FROM t2 WHERE t2.f1 >= t1.f1) s;
SELECT * FROM generate_series(2, 4) WITH ORDINALITY;
SELECT * FROM generate_series(2, 4) WITH ORDINALITY AS g(v, n);
SELECT x1.x, x2.x, g FROM xyz x1, xyz x2, generate_series(x1.x, x2.x) g WHERE x1.z = 'a' AND x2.z = 'c';
SELECT * FROM t1, generate_series(t1.f1, t1.f2);
SELECT * FROM unnest(ARRAY[10, 20]) WITH ORDINALITY;
SELECT x1.x, x2.x, g FROM xyz x1, xyz x2, generate_series(x1.x, x2.x) g;
SELECT x1.z, g.* FROM xyz x1 JOIN xyz x2 ON x1.y = x2.y, generate_series(x1.x, x2.y, 1) AS g(v);
SELECT t1.f1, g FROM t1 LEFT JOIN t2 ON t1.f1 = t2.f1, generate_series(t1.f1, t2.f2) g;
SELECT f1, g, pg_typeof(g) FROM t1, generate_series(t1.f1, 3.5) g;
SELECT g, pg_typeof(g) FROM generate_series(0.1, 0.35, 0.1) g;
SELECT generate_series(-1.5, -3, -0.5);
SELECT * FROM generate_series('2024-01-01'::date, '2024-01-03'::date, interval '1 day');
SELECT g, pg_typeof(g) FROM generate_series(2::bigint, 4) g;
SELECT generate_series(f1, f2), pg_typeof(generate_series(f1, f2)) FROM t1;
SELECT generate_series(1, 5, 0);
