SELECT 'a' || 'b', 'a' || NULL, 'a' || 1, 1 || 'a', concat('a', NULL, 1), concat_ws('-', 'a', NULL, 'b');
SELECT length('abc'), length(''), char_length('héllo'), octet_length('héllo'), bit_length('a');
SELECT upper(s), lower(s), initcap(s) FROM t ORDER BY id;
SELECT substr('hello', 2), substr('hello', 2, 3), substr('hello', 0, 2), substr('hello', -1, 3), substring('hello' from 2 for 2);
SELECT substr('hello', 2, -1);
SELECT left('hello', 2), right('hello', 2), left('hello', -2), right('hello', -2);
SELECT position('l' in 'hello'), strpos('hello', 'lo'), strpos('hello', 'z');
SELECT replace('hello', 'l', 'L'), reverse('abc'), repeat('ab', 3), repeat('x', 0), repeat('x', -1);
SELECT trim('  a  '), ltrim('  a  '), rtrim('  a  '), btrim('xxaxx', 'x'), trim(both 'x' from 'xxaxx'), trim(leading 'x' from 'xxa');
SELECT lpad('ab', 5), lpad('ab', 5, 'xy'), rpad('ab', 5, '-'), lpad('abcdef', 3), lpad('ab', -1);
SELECT split_part('a,b,c', ',', 2), split_part('a,b,c', ',', 5), split_part('a,b,c', ',', -1);
SELECT split_part('a,b,c', ',', 0);
SELECT ascii('A'), chr(65), chr(233), md5('abc'), to_hex(255), to_hex(-1);
SELECT chr(-5);
SELECT translate('hello', 'el', 'ip'), starts_with('hello', 'he'), overlay('hello' placing 'XX' from 2 for 3);
SELECT 'abc' LIKE 'a%', 'abc' LIKE 'A%', 'abc' ILIKE 'A%', 'abc' NOT LIKE '%c', 'a_c' LIKE 'a\_c', '%' LIKE '\%';
SELECT 'abc' ~ '^a', 'abc' ~* '^A', 'abc' !~ 'z', 'abc' !~* 'B';
SELECT 'a' ~ '(';
SELECT regexp_replace('hello world', 'o', '0'), regexp_replace('hello world', 'o', '0', 'g'), regexp_replace('abc', '(b)', '[\1]');
SELECT regexp_match('abc123', '[0-9]+'), regexp_match('abc', '(a)(b)'), regexp_match('abc', 'z');
SELECT 'abc' SIMILAR TO '(a|b)%', 'abc' SIMILAR TO '%(b|d)%', 'abc' NOT SIMILAR TO 'a';
SELECT s FROM t WHERE s LIKE '%a%' ORDER BY s;
SELECT s FROM t ORDER BY s;
SELECT s FROM t ORDER BY s DESC NULLS LAST;
SELECT max(s), min(s) FROM t;
SELECT v, length(v), v || '!' FROM t ORDER BY id;
SELECT 'abc'::varchar(2), 'abc'::char(5), 'abc'::varchar, 'ab  '::char(2), length('ab '::char(3));
SELECT quote_ident('a b'), quote_literal('it''s'), quote_nullable(NULL), format('%s-%s', 'a', 1), format('%I', 'A');
SELECT string_agg(a, ',' ORDER BY a) FROM n1;
SELECT encode('abc'::bytea, 'hex'), encode('abc'::bytea, 'base64'), decode('616263', 'hex');
SELECT 'x'::text = 'x'::varchar, 'a' < 'b', 'B' < 'a', 'é' > 'z';
SELECT E'a\tb', 'a\tb', E'\\', U&'\0041';
SELECT lpad(s, n, 'x'), rpad(s, n), repeat(s, n) FROM (VALUES ('ab', -1), ('ab', 0), ('ab', 3)) t(s, n);
SELECT length(lpad('a', 2147483647, 'x'));
SELECT repeat('ab', 2000000000);
SELECT s, hashtext(s) FROM (VALUES (''), ('a'), (NULL), ('twelve bytes'), ('thirteen bytes'), ('ünïcødé'), (repeat('x', 100))) t(s);
SELECT abs(hashtext('user_' || g)) % 10 AS bucket, count(*) FROM generate_series(1, 1000) g GROUP BY 1 ORDER BY 1;
-- String functions as PostgreSQL computes them (its strings topic):
-- format's width and flags, output text in concat, base64 as PostgreSQL
-- wraps it, NULL groups in regexp_match, regexp_substr, width_bucket.
SELECT format('%-5s|', 'ab'), format('%5s|', 'ab'), format('%*s|', 4, 'x'), format('%-*s|', 4, 'x'), format('%*s|', -4, 'x'), format('%2$s %1$s', 'a', 'b'), format('%1$*2$s|', 'a', 3), format('100%%'), format('%s %s', 'a', NULL), format('%3$s', 1, 2);
SELECT format('%I %L', 'XyZ', NULL), format('%-10I|', 'a b');
SELECT quote_ident('XyZ'), quote_ident('abc'), quote_ident('a"b'), concat(true, 'x'), concat(1, NULL, 2.50, false), concat_ws('-', 'a', NULL, true, 1), concat_ws(NULL, 'a');
SELECT concat(DATE '2024-01-02', ' ', 1.5::float8, ' ', ARRAY[1,2]);
SELECT encode('se'::bytea, 'base64'), encode('\x00ff5c41'::bytea, 'escape'), encode('abc'::bytea, 'hex'), decode('c2U=', 'base64'), decode('616263', 'hex'), decode('a\\000b', 'escape');
SELECT encode(repeat('x', 60)::bytea, 'base64');
SELECT regexp_match('abc', '(b)(c)(d)?'), regexp_match('abc', 'B', 'i'), regexp_match('abc', 'z'), regexp_match('foobarbequebaz', 'ba.'), regexp_match('a' || chr(10) || 'b', 'a.b');
SELECT regexp_substr('abc123def456', '[0-9]+'), regexp_substr('abc123def456', '[0-9]+', 1, 2), regexp_substr('abc123def456', '([a-z]+)([0-9]+)', 1, 2, '', 2), regexp_substr('ABC', 'b', 1, 1, 'i'), regexp_substr('abc', 'z');
SELECT width_bucket(5.35, 0.024, 10.06, 5), width_bucket(-1, 0, 10, 5), width_bucket(10, 0, 10, 5), width_bucket(9, 10, 0, 5), width_bucket(5.35::float8, 0.024, 10.06, 5);
SELECT width_bucket(1, 0, 10, 0);
SELECT regexp_match('abc', 'b', 'g');
SELECT id, concat(s, i, x) FROM t ORDER BY id;
SELECT id, width_bucket(x, 0, 100, 4), regexp_match(s, '(.)(.)?') FROM t ORDER BY id;
SELECT 'a_c' LIKE 'a#_c' ESCAPE '#', 'abc' LIKE 'a#_c' ESCAPE '#', 'a%c' NOT LIKE 'a!%c' ESCAPE '!', 'A_C' ILIKE 'a$_c' ESCAPE '$', 'a\c' LIKE 'a\c' ESCAPE '', 'a_c' LIKE 'a\_c' ESCAPE '\';
SELECT id, s LIKE '%#%%' ESCAPE '#' FROM t ORDER BY id;
-- char(n): trailing spaces do not count where it meets text (issue 72).
SELECT 'a'::char(3) = 'a '::varchar(3), 'a '::char(3) = 'a ', 'a '::char(3) = 'a '::text, 'a'::char(3) < 'a '::varchar;
SELECT 'ab'::char(4) || 'x', 'ab'::char(4)::text || 'x', upper('ab'::char(4)) || 'x', concat('ab'::char(4), 'x'), 'ab'::char(4)::varchar || '|', 'ab'::char(4) LIKE 'ab', length('ab '::char(5));
-- The "char" type: one character of text.
SELECT 'a'::"char", 'abc'::"char", pg_typeof('a'::"char"), 'b'::"char" > 'a'::"char";
-- regexp_split_to_array skips empty matches at the ends and after a match.
SELECT regexp_split_to_array('hello world', '\s+'), regexp_split_to_array('abc', ''), regexp_split_to_array('a,b,', ','), regexp_split_to_array('abc', 'x*'), regexp_split_to_array('ABC', 'b', 'i');
SELECT id, regexp_split_to_array(s, ' ') FROM t ORDER BY id;
SELECT regexp_split_to_array('abc', 'b', 'g');
-- Bytes of bytea.
SELECT id, get_byte(raw, 0), bit_count(raw), set_byte(raw, 0, 65) FROM t WHERE length(raw) > 0 ORDER BY id;
SELECT get_byte('\x1234567890'::bytea, 4), set_byte('\x1234567890'::bytea, 4, 320), bit_count('\x1234567890'::bytea);
SELECT get_byte('\x12'::bytea, 1);
