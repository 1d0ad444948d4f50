SELECT 1 + 1, 7 / 2, -7 / 2, 7 % 3, -7 % 3, 2 ^ 10, 2.0 ^ 0.5;
SELECT 7.0 / 2, 1.5 + 2.25, 1.50 * 2, 10.0 / 3, 2 * 3.5, 1 / 3.0;
SELECT 0.1 + 0.2, 0.1::float8 + 0.2::float8, 1e3, 1.5e-3, 12345678901234567890;
SELECT 9223372036854775807 + 1;
SELECT 2147483647::int + 1;
SELECT 32767::smallint + 1::smallint;
SELECT 1 / 0;
SELECT 1.0 / 0;
SELECT 1::float8 / 0;
SELECT 5 % 0;
SELECT abs(-5), abs(-5.5), abs(-2.5::float8), sign(-3), sign(0.0), sign(2.5::float8);
SELECT ceil(1.2), floor(-1.2), ceil(-1.5::float8), floor(1.5::float8), ceiling(2.1);
SELECT round(1.2345, 2), round(-1.235, 2), round(1.5), round(-0.5), round(123.456, -1), trunc(1.789, 1), trunc(-1.7);
SELECT round(y, 1), round(y), trunc(y, 2) FROM t ORDER BY id;
SELECT sqrt(16), sqrt(2::float8), cbrt(27::float8), exp(1::float8), ln(10::float8), log(100::float8), log10(1000::float8);
SELECT power(2, 10), power(2.0, 3), power(2::float8, 0.5), mod(10, 3), mod(-10, 3), div(7, 2);
SELECT pi(), degrees(pi()), radians(180::float8), sin(0::float8), cos(0::float8), atan2(1::float8, 1::float8);
SELECT gcd(12, 18), lcm(4, 6), factorial(5);
SELECT 10::int / 4::int, 10::bigint / 4, 10.0 / 4, 10::float8 / 4;
SELECT y + 1, y * 2, y / 2, y - 0.001, -y FROM t ORDER BY id;
SELECT x + 1, x * 2, x / 2, -x, r * 2 FROM t ORDER BY id;
SELECT n + i, n * b, b - n, i * i FROM t WHERE id IN (1, 2, 5, 6) ORDER BY id;
SELECT b * 2 FROM t WHERE id = 2;
SELECT n * n FROM t WHERE id = 4;
SELECT i + i FROM t WHERE id = 4;
SELECT CAST(y AS INT), CAST(x AS INT), CAST(r AS BIGINT), CAST(y AS DOUBLE PRECISION), CAST(x AS NUMERIC(10,2)) FROM t ORDER BY id;
SELECT CAST('12' AS INT), CAST(' 12 ' AS INT), CAST('1.5' AS NUMERIC), CAST('1e2' AS FLOAT8), CAST('NaN' AS FLOAT8), CAST('-Infinity' AS REAL);
SELECT CAST('abc' AS INT);
SELECT CAST('1.5' AS INT);
SELECT CAST(99999 AS SMALLINT);
SELECT CAST(1e20 AS BIGINT);
SELECT CAST(123.456 AS NUMERIC(5,2)), CAST(1.005 AS NUMERIC(4,2)), CAST(-1.005 AS NUMERIC(4,2));
SELECT CAST(12345.6 AS NUMERIC(5,2));
SELECT 1.0::float4, 0.1::float4, 1e10::float4, 3.14159265358979::float8, 1e-10::float8;
SELECT 100::numeric, 100.00::numeric, 1.10, 0.0, -0.0, 1e5::numeric;
SELECT 5 BETWEEN 1 AND 10, 5 NOT BETWEEN 6 AND 10, 5 BETWEEN SYMMETRIC 10 AND 1;
SELECT 3 = 3.0, 1 < 1.5, 2::float8 = 2, 0.1::float4 = 0.1::float8;
SELECT 'NaN'::float8 = 'NaN'::float8, 'NaN'::float8 > 1e308, 'Infinity'::float8 + 1;
SELECT sum(b) FROM t WHERE id IN (1, 2);
SELECT sum(i), sum(n), sum(b), sum(x), sum(r), sum(y) FROM t WHERE id <> 2;
SELECT avg(i), avg(n), avg(x), avg(y) FROM t;
SELECT 4 # 1, 5 & 3, 5 | 3, ~5, 1 << 4, 256 >> 2;
SELECT @ -5, |/ 25, ||/ 27;
SELECT to_char(1234.5, '9999.99'), to_char(0.5, '0.00'), to_char(-12, '999'), to_char(1234567, '9,999,999');
-- Numbers read from text and their ranges (PostgreSQL's float8, float4
-- and numeric regression topics): out of range fails with 22003, never
-- infinity, zero or a wrapped number.
SELECT '10e400'::float8;
SELECT '-10e-400'::float8;
SELECT '1e39'::float4;
SELECT ' 12.5 '::float8, '-0'::float8, 'infinity'::float8, '-Infinity'::float8, '+inf'::float4, '1e3'::float4;
SELECT 'abc'::float8;
SELECT '1e'::float8;
SELECT '1e-300'::float8 * '1e-200'::float8;
SELECT 1e-200::float8 / 1e200::float8;
SELECT 0::float8 * 1e-300::float8, 1e-300::float8 / 'inf'::float8;
SELECT '2e40'::float8::float4;
SELECT 1e-50::float8::float4;
SELECT 1.5::float8::float4, 'inf'::float8::float4;
SELECT '1e3'::numeric, ' 1.5e2 '::numeric, '-.5'::numeric, '1.'::numeric, '1e-3'::numeric, '2.50'::numeric;
SELECT '12.345'::numeric(4,2), '-12.345'::numeric(4,2), '0.005'::numeric(3,2);
SELECT '123.45'::numeric(4,2);
SELECT 'abc'::numeric;
SELECT 1.23::float4::numeric, 0.1::float8::numeric, 1e20::float8::numeric, 1.5e-7::float4::numeric;
SELECT 3::float8::numeric, -2.5e-5::float8::numeric, 0.5::float4::numeric;
SELECT sum(x) FROM (VALUES (9e27::numeric), (9e27::numeric)) t(x);
SELECT sum(x) FROM (VALUES (9e27::numeric(30,1)), (9e27::numeric(30,1))) t(x);
-- to_char's number template language (issue 72): ordinals, sign patterns,
-- EEEE, roman numerals, V, fill mode, '#' on overflow.
SELECT to_char(42, 'FM999th'), to_char(11, '99th'), to_char(3, '99TH'), to_char(-3, 'FM99th'), to_char(3.7, 'FM9th');
SELECT to_char(-42, 'S99'), to_char(42, 'S99'), to_char(-5, '999S'), to_char(5, '999MI'), to_char(-5, 'MI999'), to_char(5, 'PL999'), to_char(-5, 'SG999');
SELECT to_char(-5, '999PR'), to_char(5, '999PR'), to_char(1, 'L999'), to_char(12, '99V9'), to_char(1.5, '9V99');
SELECT to_char(1234.5, '9.99EEEE'), to_char(-0.000123, '9.99EEEE'), to_char(0, '9.99EEEE'), to_char(1e20::float8, '9.9EEEE');
SELECT to_char(0.5, 'FM990.0'), to_char(0.5, 'FM999.999'), to_char(12, 'FM999.'), to_char(100, 'FM999.99'), to_char(0.1, '9.9'), to_char(-0.1, '9.9'), to_char(-0.1, 'FM9.9');
SELECT to_char(3, 'FMRN'), to_char(1994, 'RN'), to_char(4000, 'RN'), to_char(14, 'rn');
SELECT to_char(123, '00000'), to_char(123, '09999'), to_char(123, '99099'), to_char(0, '999'), to_char(12345, '99'), to_char(-12.5, '99');
SELECT to_char(-1234567.891, 'FM9G999G999D00'), to_char(1234567, '9,999,999'), to_char(1.23::float4, '9.99'), to_char(2.5::float8, '9');
-- smallint shifts are smallints (their low 16 bits).
SELECT 1::int2 << 15, 5::int2 << 20, 1::int2 >> 1, pg_typeof(1::int2 << 1);
-- A quoted literal in arithmetic takes the other operand's type.
SELECT '1'::int + '2', 1 + '2', 1.5 * '2', 10 / '4', '2.50' - 1.5, 2.5::float8 * '2';
-- Trigonometry in degrees, exact where PostgreSQL makes it exact.
SELECT sind(30), cosd(60), tand(45), cotd(45), sind(-90), cosd(180), tand(135), sind(390), asind(0.5), acosd(0.5), acosd(-0.5), atand(1), atan2d(1, 1), atan2d(-1, 0);
SELECT id, sind(x), cosd(x), atand(x), asind(x / 10) FROM t WHERE x IS NOT NULL AND abs(x) <= 10 ORDER BY id;
SELECT asind(2);
SELECT cosd('Infinity'::float8);
SELECT scale(y), min_scale(y), scale(1.500), min_scale(10.100), scale(12), min_scale(0.000) FROM t ORDER BY id;
SELECT num_nulls(i, n, b, s), num_nonnulls(i, n, b, s), num_nulls(NULL, 1) FROM t ORDER BY id;
SELECT pg_size_pretty(10239::bigint), pg_size_pretty(10240::bigint), pg_size_pretty(20971520::bigint), pg_size_pretty(-1000000000::bigint), pg_size_pretty(9223372036854775807::bigint), pg_size_pretty(b) FROM t ORDER BY id;
