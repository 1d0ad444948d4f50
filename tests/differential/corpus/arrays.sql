SELECT '{1,2}'::text[], '{a,"b c",NULL}'::text[], '{}'::int[];
SELECT CAST('{1, 2 ,3}' AS int[]), CAST('{-5,6}' AS bigint[]), '{t,f}'::bool[];
SELECT CAST(NULL AS text)::int[];
SELECT array_length('{a,b,c}'::text[], 1), ('{5,6}'::int[])[2];
SELECT 2 = ANY('{1,2}'::int[]), 3 = ANY('{1,2}'::int[]);
SELECT '{2026-01-01,2026-02-01}'::date[];
SELECT '{1,x}'::int[];
SELECT '1,2'::int[];
SELECT s, CAST('{' || s || '}' AS text[]) FROM t ORDER BY id;
SELECT array_remove(ARRAY[1,2,1], 1), array_replace(ARRAY[1,2,1], 1, 9);
SELECT array_remove(ARRAY['a',NULL,'b',NULL], NULL);
SELECT 1 = ANY(ARRAY[2, NULL]), 1 = ANY(ARRAY[1, NULL]), NULL::int = ANY(ARRAY[]::int[]), 2 <> ALL(ARRAY[1, NULL]);
SELECT array_remove(ARRAY[1,NULL,2,1], 1), array_remove(NULL::int[], 1), array_remove(ARRAY[]::int[], 1);
SELECT array_remove(ARRAY[[1,2],[1,3]], 1);
SELECT id, array_remove(ARRAY['a', s, 'b'], s) FROM t ORDER BY id;
SELECT ARRAY[[1,2]] || ARRAY[]::int[], ARRAY[]::int[] || ARRAY[[1,2]], ARRAY[1,2] || ARRAY[]::int[];
SELECT ARRAY[[1,2]] || ARRAY[3,4]::int[], ARRAY[3,4]::int[] || ARRAY[[1,2]], ARRAY[[1,2]] || NULL::int[];
SELECT NULL::int[] || ARRAY[1], ARRAY[1] || 2, 0 || ARRAY[1], ARRAY[[1,2]] || ARRAY[[3,4]];
SELECT array_length(ARRAY[]::int[], 1), array_length(ARRAY[1,2], 1), cardinality(ARRAY[]::int[]), array_length(ARRAY[1], 2);
-- Containment and overlap: NULL elements match nothing (issue 72).
SELECT ARRAY[1,3,NULL] @> ARRAY[1,NULL], ARRAY[1,2] @> ARRAY[]::int[], ARRAY[1,2] <@ ARRAY[2,1,3], ARRAY[1,2] && ARRAY[2,NULL], ARRAY[NULL]::int[] && ARRAY[NULL]::int[];
SELECT ARRAY[[1,2],[3,4]] @> ARRAY[4], NULL::int[] @> ARRAY[1];
SELECT array_cat(ARRAY[[1,2]], ARRAY[]::int[]), array_cat(ARRAY[1], ARRAY[2,3]), array_cat(ARRAY[]::int[], ARRAY[[5,6]]);
-- array_dims as bounds text; trim_array drops the last elements.
SELECT array_dims(ARRAY[[1,2,3],[4,5,6]]), array_dims(ARRAY[1,2]), array_dims(ARRAY[]::int[]), array_dims(NULL::int[]), array_dims(ARRAY['a']);
SELECT trim_array(ARRAY[1,2,3,4,5,6], 2), trim_array(ARRAY['a','b'], 0), trim_array(ARRAY[1], 1), trim_array(NULL::int[], 1), trim_array(ARRAY[[1,2],[3,4]], 1);
SELECT trim_array(ARRAY[1,2], 3);
SELECT trim_array(ARRAY[1,2], -1);
SELECT pg_typeof(clock_timestamp());
