-- Materialized views of the differential suite. Each is created in Sluice
-- and compared with PostgreSQL's answer to its query over the same rows,
-- after each step of `views_answer_as_postgres` (inserts, updates and
-- deletes of the keyed table, SIGKILL and restart, more inserts). The
-- tables are in views_schema.sql; one view per statement.
CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS c, sum(n) AS s, min(x) AS lo, max(x) AS hi, avg(x) AS a FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW per_minute AS SELECT date_bin(INTERVAL '1 minute', ts, TIMESTAMP '1970-01-01') AS w, count(*) AS c, max(n) AS m FROM ev GROUP BY 1;
CREATE MATERIALIZED VIEW arithmetic AS SELECT id, x * 2 AS x2, x / 4 AS q, n % 7 AS m, -x AS neg, round(x, 1) AS r FROM ev WHERE n > 0;
CREATE MATERIALIZED VIEW distinct_n AS SELECT k, count(DISTINCT n) AS d FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW distinct_aggregates AS SELECT k, sum(DISTINCT n)::bigint AS sd, avg(DISTINCT n)::numeric(20,6) AS ad, string_agg(DISTINCT id::text, ',') AS ids, array_agg(DISTINCT n) AS ns FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW busy AS SELECT k, count(*) AS c FROM ev GROUP BY k HAVING count(*) > 1;
CREATE MATERIALIZED VIEW formatted AS SELECT id, upper(k) AS u, to_char(ts, 'YYYY-MM-DD HH24:MI') AS d, date_trunc('hour', ts) AS h FROM ev;
CREATE MATERIALIZED VIEW late_week AS SELECT id, ts - TIMESTAMP '2026-01-01' AS since FROM ev WHERE (ts - TIMESTAMP '2026-01-01') > INTERVAL '7 days';
CREATE MATERIALIZED VIEW top3 AS SELECT id, n FROM ev ORDER BY n DESC, id DESC LIMIT 3;
CREATE MATERIALIZED VIEW null_safe AS SELECT n1.a, n2.b FROM n1 JOIN n2 ON n1.k IS NOT DISTINCT FROM n2.k;
CREATE MATERIALIZED VIEW left_nulls AS SELECT n1.k, n1.a, n2.b FROM n1 LEFT JOIN n2 ON n1.k = n2.k;
CREATE MATERIALIZED VIEW most_common AS SELECT a.k, a.n FROM (SELECT k, count(*) AS n FROM ev GROUP BY k) a JOIN (SELECT max(n) AS m FROM (SELECT k, count(id) AS n FROM ev GROUP BY k) c) b ON a.n = b.m;
CREATE MATERIALIZED VIEW most_common_keyed AS SELECT a.grp, a.n FROM (SELECT grp, count(*) AS n FROM kv GROUP BY grp) a JOIN (SELECT max(n) AS m FROM (SELECT grp, count(k) AS n FROM kv GROUP BY grp) c) b ON a.n = b.m;
CREATE MATERIALIZED VIEW per_grp AS SELECT grp, count(*) AS c, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM kv GROUP BY grp;
CREATE MATERIALIZED VIEW kv_doubled AS SELECT k, grp, v * 2 AS d FROM kv WHERE v > 10;
CREATE MATERIALIZED VIEW kv_json AS SELECT k, doc -> 'a' AS a, doc ->> 'b' AS b FROM kv WHERE doc ? 'a';
CREATE MATERIALIZED VIEW cte_big AS WITH big AS (SELECT id, k, n FROM ev WHERE n > 2) SELECT k, count(*) AS c, max(n) AS m FROM big GROUP BY k;
CREATE MATERIALIZED VIEW cte_chain AS WITH a (key, val) AS (SELECT grp, v FROM kv), b AS (SELECT key, val FROM a WHERE val > 10) SELECT key, count(*) AS c, max(val) AS m FROM b GROUP BY key;
CREATE MATERIALIZED VIEW cte_join AS WITH pos AS (SELECT id, k FROM ev WHERE n > 0) SELECT n1.a, pos.id FROM n1 JOIN pos ON pos.k = n1.a;
CREATE MATERIALIZED VIEW above_group AS SELECT * FROM (SELECT k, count(*) AS c, sum(id) AS s FROM ev GROUP BY k) g WHERE c > 12;
CREATE MATERIALIZED VIEW above_group_keyed AS SELECT grp, s * 2 AS twice FROM (SELECT grp, sum(v) AS s FROM kv GROUP BY grp) g WHERE s > 40;
CREATE MATERIALIZED VIEW over_scalar AS SELECT id, n FROM ev WHERE n > (SELECT avg(v) FROM kv);
CREATE MATERIALIZED VIEW having_scalar AS SELECT k, count(*) AS c FROM ev GROUP BY k HAVING count(*) >= (SELECT count(*) FROM kv) / 3;
CREATE MATERIALIZED VIEW both_keys AS SELECT k FROM n1 INTERSECT SELECT k FROM n2;
CREATE MATERIALIZED VIEW left_keys AS SELECT k FROM n1 EXCEPT SELECT k FROM n2;
CREATE MATERIALIZED VIEW filtered_count AS SELECT k, count(*) FILTER (WHERE n > 10) AS c, sum(id) FILTER (WHERE x > 0) AS s FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW more_aggregates AS SELECT k, bool_and(n > 0) AS every_positive, bool_or(n > 50) AS any_big, string_agg(id::text, ',' ORDER BY id) AS ids, array_agg(n ORDER BY id) AS ns, stddev(x::float8) AS sd, var_pop(n::float8) AS vp, count(DISTINCT n) AS d, count(*) AS c FROM ev GROUP BY k;
CREATE MATERIALIZED VIEW more_aggregates_keyed AS SELECT grp, bool_and(v > 5) AS all_over_5, bool_or(doc ? 'a') AS any_a, string_agg(k::text, ';' ORDER BY v DESC, k) AS ks, array_agg(v ORDER BY k) AS vs, stddev_pop(v::float8) AS sd, variance(v::float8) AS va FROM kv GROUP BY grp;
CREATE MATERIALIZED VIEW ordered AS SELECT id, k, n FROM ev ORDER BY k DESC, n NULLS FIRST, id;
CREATE MATERIALIZED VIEW ordered_keyed AS SELECT k, grp, v FROM kv WHERE v > 5 ORDER BY grp, v DESC, k;
CREATE MATERIALIZED VIEW ordered_groups AS SELECT grp, count(*) AS c, sum(v) AS s FROM kv GROUP BY grp ORDER BY s DESC NULLS LAST, grp;
CREATE MATERIALIZED VIEW page_two AS SELECT id, n FROM ev ORDER BY n DESC NULLS LAST, id LIMIT 5 OFFSET 5;
CREATE MATERIALIZED VIEW page_two_keyed AS SELECT k, v FROM kv ORDER BY v, k LIMIT 4 OFFSET 3;
CREATE MATERIALIZED VIEW after_ten AS SELECT id, x FROM ev ORDER BY x, id OFFSET 10;
CREATE MATERIALIZED VIEW full_nulls AS SELECT n1.k AS lk, n1.a, n2.k AS rk, n2.b FROM n1 FULL OUTER JOIN n2 ON n1.k = n2.k;
CREATE MATERIALIZED VIEW full_keyed AS SELECT kv.k, kv.grp, n2.b FROM kv FULL JOIN n2 ON kv.k = n2.k;
CREATE MATERIALIZED VIEW ranked AS SELECT id, k, n, rank() OVER (PARTITION BY k ORDER BY n NULLS FIRST) AS r, dense_rank() OVER (PARTITION BY k ORDER BY n NULLS FIRST) AS dr FROM ev;
CREATE MATERIALIZED VIEW running AS SELECT id, k, sum(id) OVER (PARTITION BY k ORDER BY id) AS running, count(*) OVER (PARTITION BY k ORDER BY id) AS c FROM ev;
CREATE MATERIALIZED VIEW neighbours AS SELECT id, lag(n) OVER (PARTITION BY k ORDER BY id) AS prev, lead(id, 2, 0) OVER (PARTITION BY k ORDER BY id) AS after2 FROM ev;
CREATE MATERIALIZED VIEW numbered_keyed AS SELECT k, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v, k) AS rn, lag(v) OVER (PARTITION BY grp ORDER BY v, k) AS prev FROM kv;
-- Bounded frames and numbering: a change recomputes only the rows it reaches.
CREATE MATERIALIZED VIEW near_rows AS SELECT id, k, sum(id) OVER (PARTITION BY k ORDER BY n, id ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS near, row_number() OVER (PARTITION BY k ORDER BY n, id) AS rn, dense_rank() OVER (PARTITION BY k ORDER BY n, id) AS dr, lag(id, 3) OVER (PARTITION BY k ORDER BY n, id) AS back3 FROM ev;
CREATE MATERIALIZED VIEW numbered_all AS SELECT id, row_number() OVER (ORDER BY x, id) AS rn FROM ev;
CREATE MATERIALIZED VIEW span_rows AS SELECT id, d, t, d * 2 AS twice, t + INTERVAL '90 minutes' AS later, -d AS negated FROM spans WHERE id % 2 = 0;
CREATE MATERIALIZED VIEW span_totals AS SELECT id % 3 AS g, sum(d) AS total, min(d) AS shortest, max(t) AS latest, count(t) AS times FROM spans GROUP BY id % 3;
CREATE MATERIALIZED VIEW tied AS SELECT id, k, n FROM ev ORDER BY n DESC NULLS LAST FETCH FIRST 3 ROWS WITH TIES;
-- Only v is shown: which of several rows tied at the OFFSET is skipped is
-- PostgreSQL's arbitrary choice, but their values are not.
CREATE MATERIALIZED VIEW tied_keyed AS SELECT v, v % 7 AS r FROM kv ORDER BY v OFFSET 2 FETCH FIRST 3 ROWS WITH TIES;
CREATE MATERIALIZED VIEW tied_groups AS SELECT grp, count(*) AS c FROM kv GROUP BY grp ORDER BY c DESC FETCH FIRST 1 ROW WITH TIES;
CREATE MATERIALIZED VIEW span_extremes AS SELECT id % 2 AS g, max(d) AS longest, min(d) AS shortest FROM spans GROUP BY id % 2;
CREATE MATERIALIZED VIEW span_order AS SELECT id, d FROM spans ORDER BY d DESC NULLS LAST, id LIMIT 6;
CREATE MATERIALIZED VIEW span_ranks AS SELECT id, d, rank() OVER (ORDER BY d NULLS FIRST) AS r, lag(id) OVER (ORDER BY d, id) AS before FROM spans;
CREATE MATERIALIZED VIEW bag_elements AS SELECT id, x FROM bags, unnest(bags.xs) AS x;
CREATE MATERIALIZED VIEW bag_joined_elements AS SELECT b.id, n1.a, x FROM bags b JOIN n1 ON n1.k = b.id, LATERAL unnest(b.xs) AS x;
CREATE MATERIALIZED VIEW bag_tag_counts AS SELECT tag, count(*) AS c FROM bags, unnest(bags.tags) AS tag GROUP BY tag;
CREATE MATERIALIZED VIEW bag_any AS SELECT id, xs, tags FROM bags WHERE 2 = ANY(xs) OR 'a' = ANY(tags);
CREATE MATERIALIZED VIEW bag_sizes AS SELECT id, cardinality(xs) AS n, xs[1] AS first, xs[2] AS second FROM bags;
CREATE MATERIALIZED VIEW bag_lists AS SELECT id % 3 AS g, array_agg(id ORDER BY id) AS ids FROM bags GROUP BY 1;
CREATE MATERIALIZED VIEW kv_elements AS SELECT k, e FROM kv, LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(kv.doc -> 'b') = 'array' THEN kv.doc -> 'b' ELSE '[]'::jsonb END) AS e;
CREATE MATERIALIZED VIEW bag_elements_left AS SELECT b.id, u.x FROM bags b LEFT JOIN LATERAL unnest(b.xs) AS u(x) ON true;
CREATE MATERIALIZED VIEW kv_elements_left AS SELECT k, e FROM kv LEFT JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(kv.doc -> 'b') = 'array' THEN kv.doc -> 'b' ELSE '[]'::jsonb END) AS e ON true;
CREATE MATERIALIZED VIEW kv_fields AS SELECT key, count(*) AS c FROM kv, jsonb_each_text(kv.doc) GROUP BY key;
CREATE MATERIALIZED VIEW kv_keys AS SELECT k, jsonb_object_keys(doc) AS key FROM kv;
CREATE MATERIALIZED VIEW constant_rows AS VALUES (1, 'a'), (2, NULL), (2, 'b');
CREATE MATERIALIZED VIEW constant_squares AS SELECT g, g * g AS sq FROM generate_series(1, 5) g;
CREATE MATERIALIZED VIEW constant_groups AS SELECT column2 AS k, count(*) AS n, sum(column1) AS s FROM (VALUES (1, 'a'), (2, 'b'), (3, 'a')) v GROUP BY 1;
CREATE MATERIALIZED VIEW constant_lag AS SELECT x, lag(x) OVER (ORDER BY x) AS prev FROM (VALUES (1), (2), (3)) t(x);
CREATE MATERIALIZED VIEW ev_ratio AS SELECT count(*) / count(n) AS per_counted, count(*) AS rows FROM ev;
CREATE MATERIALIZED VIEW ev_span_kinds AS SELECT k, count(DISTINCT CASE WHEN id % 2 = 0 THEN INTERVAL '1 day' ELSE INTERVAL '24 hours' END) AS spans FROM ev GROUP BY k;
