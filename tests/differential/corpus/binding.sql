-- Name binding (PostgreSQL's regression topics subselect and
-- namespace resolution): a name resolves in the innermost scope that has
-- it, whatever relations the outer scopes share with it.
SELECT * FROM abc WHERE a = ANY (SELECT a FROM abc WHERE b = 10);
SELECT * FROM abc WHERE a = ALL (SELECT a FROM abc WHERE b = 10);
SELECT * FROM abc WHERE a > ANY (SELECT a FROM abc WHERE b >= 20);
SELECT * FROM abc WHERE a IN (SELECT a FROM abc WHERE b = 20);
SELECT * FROM abc WHERE a NOT IN (SELECT a FROM abc WHERE b = 20);
SELECT * FROM abc WHERE EXISTS (SELECT 1 FROM abc WHERE b = 10);
SELECT * FROM abc WHERE EXISTS (SELECT 1 FROM abc x WHERE x.a = abc.a AND b = 20);
SELECT a, (SELECT max(b) FROM abc WHERE a < 3) FROM abc;
SELECT a, (SELECT count(*) FROM abc WHERE abc.a > 1) FROM abc;
SELECT * FROM abc WHERE b = (SELECT b FROM abc WHERE a = 2);
SELECT * FROM abc WHERE (SELECT count(*) FROM abc WHERE c > 150) = 2;
SELECT * FROM abc a1 WHERE a IN (SELECT a FROM abc WHERE abc.b = a1.b);
SELECT * FROM t1 WHERE f1 IN (SELECT f1 FROM t2);
SELECT * FROM t1 WHERE f1 IN (SELECT t1.f1 FROM t2);
SELECT * FROM t1 WHERE f2 = ANY (SELECT f2 FROM t2 WHERE f1 > 1);
SELECT f1, (SELECT f2 FROM t2 WHERE t2.f1 = t1.f1) FROM t1;
SELECT * FROM t1 WHERE EXISTS (SELECT 1 FROM t1 WHERE f1 = 3);
SELECT * FROM l WHERE EXISTS (SELECT 1 FROM l AS l2 LEFT JOIN r ON l.la = r.ra);
SELECT * FROM l WHERE EXISTS (SELECT 1 FROM l AS l2 LEFT JOIN r ON l2.la = r.ra WHERE l.la = l2.la);
SELECT * FROM l WHERE EXISTS (SELECT 1 FROM r RIGHT JOIN l AS l2 ON l.la = r.ra);
SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM l AS l2 LEFT JOIN r ON l.la = r.ra WHERE r.ra IS NOT NULL);
WITH t1 AS (VALUES (100, 200)) SELECT * FROM public.t1;
WITH t1 AS (VALUES (100, 200)) SELECT * FROM t1;
SELECT * FROM (t1 a JOIN t1 b USING (f1));
SELECT * FROM (SELECT * FROM t1) q JOIN t2 USING (f1);
SELECT * FROM t1 x, LATERAL (SELECT * FROM t2 WHERE t2.f1 = x.f1) y;
SELECT k, (SELECT b FROM n2 WHERE n2.k = n1.k) FROM n1;
SELECT a, (SELECT b FROM n2 WHERE n2.k = n1.k AND b <> 's') FROM n1;
SELECT a, (SELECT upper(b) FROM n2 WHERE n2.k = n1.k AND n2.b < 's') AS up FROM n1;
SELECT la, (SELECT rb FROM r WHERE r.ra = l.la) FROM l;
