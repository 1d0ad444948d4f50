SELECT '{1,2}'::text[], '{a,"b c",NULL}'::text[], '{}'::int[];
SELECT CAST('{1, 2 ,3}' AS int[]), CAST('{-5,6}' AS bigint[]), '{t,f}'::bool[];
SELECT CAST(NULL AS text)::int[];
SELECT array_length('{a,b,c}'::text[], 1), ('{5,6}'::int[])[2];
SELECT 2 = ANY('{1,2}'::int[]), 3 = ANY('{1,2}'::int[]);
SELECT '{2026-01-01,2026-02-01}'::date[];
SELECT '{1,x}'::int[];
SELECT '1,2'::int[];
SELECT s, CAST('{' || s || '}' AS text[]) FROM t ORDER BY id;
