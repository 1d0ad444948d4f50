-- LATERAL subqueries and correlated subqueries whose correlation is not an
-- equality (PostgreSQL's regression topics join and subselect): each is
-- evaluated per outer row, so windows, LIMITs and aggregates inside count
-- the rows of that outer row alone.
SELECT t1.f1, s.f2 FROM t1, LATERAL (SELECT f2 FROM t2 WHERE t2.f1 > t1.f1 - 10 ORDER BY f2 DESC LIMIT 1) s;
SELECT t1.f1, s.f2 FROM t1, LATERAL (SELECT f2 FROM t2 WHERE t2.f1 = t1.f1 ORDER BY f2 DESC LIMIT 1) s;
SELECT t1.f1, s.f2 FROM t1 LEFT JOIN LATERAL (SELECT f2 FROM t2 WHERE t2.f1 = t1.f1 ORDER BY f2 DESC LIMIT 1) s ON true;
SELECT t1.f1, s.n FROM t1 LEFT JOIN LATERAL (SELECT count(*) AS n FROM t2 WHERE t2.f1 = t1.f1) s ON true;
SELECT t1.f1, s.n FROM t1, LATERAL (SELECT count(*) AS n FROM t2 WHERE t2.f1 = t1.f1) s;
SELECT f1, (SELECT max(f2) FROM t2 WHERE t2.f1 > t1.f1) FROM t1;
SELECT k, (SELECT count(*) FROM n2 WHERE n2.k > n1.k) FROM n1;
SELECT k, (SELECT min(b) FROM n2 WHERE n2.k <> n1.k OR n1.k IS NULL) FROM n1;
SELECT count(*) FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.f1 > t1.f1);
SELECT * FROM n1 WHERE EXISTS (SELECT 1 FROM n2 WHERE n2.k > n1.k AND EXISTS (SELECT 1 FROM t2 WHERE t2.f1 <= n2.k));
SELECT f1, count(*) FROM t1 GROUP BY f1 HAVING count(*) < (SELECT count(*) FROM t2 WHERE t2.f1 > t1.f1);
SELECT f1, (SELECT f2 FROM t2 WHERE t2.f1 >= t1.f1) FROM t1;
SELECT * FROM t1 WHERE f2 > ALL (SELECT f1 FROM t2 WHERE t2.f2 > t1.f1) ORDER BY f1;
SELECT * FROM t1 WHERE f2 < ANY (SELECT f1 FROM t2 WHERE t2.f2 > t1.f1) ORDER BY f1;
SELECT la, (SELECT string_agg(rb::text, ',' ORDER BY rb) FROM r WHERE r.ra >= l.la) FROM l ORDER BY la;
SELECT la, s.* FROM l, LATERAL (SELECT ra, row_number() OVER (ORDER BY ra DESC) AS rn FROM r WHERE r.ra > l.la) s ORDER BY la, rn;
SELECT la, s.* FROM l LEFT JOIN LATERAL (SELECT ra, rb FROM r WHERE r.ra > l.la ORDER BY ra LIMIT 1) s ON true ORDER BY la;
SELECT la, s.* FROM l CROSS JOIN LATERAL (SELECT sum(rb) AS total, count(*) c FROM r WHERE r.ra BETWEEN l.la AND l.la + 2) s ORDER BY la;
SELECT la, s.x FROM l, LATERAL (SELECT l.lb + r.rb AS x FROM r WHERE r.ra < l.la) s ORDER BY 1, 2;
SELECT la, (SELECT l.lb * 2 FROM r WHERE r.ra = 1) FROM l ORDER BY 1;
SELECT la FROM l WHERE la IN (SELECT ra FROM r WHERE r.rb IS DISTINCT FROM l.lb) ORDER BY 1;
SELECT la FROM l WHERE la NOT IN (SELECT ra FROM r WHERE r.rb > coalesce(l.lb, 0)) ORDER BY 1;
SELECT a.la, b.la FROM l a JOIN l b ON a.la < b.la WHERE EXISTS (SELECT 1 FROM r WHERE r.ra BETWEEN a.la AND b.la) ORDER BY 1, 2;
SELECT la, s.* FROM l, LATERAL (SELECT DISTINCT ON (ra > 1) ra FROM r WHERE ra <> l.la ORDER BY ra > 1, ra) s ORDER BY 1, 2;
