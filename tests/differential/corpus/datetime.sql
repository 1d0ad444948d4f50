SELECT DATE '2026-01-31' + 1, DATE '2026-03-01' - 1, DATE '2026-03-01' - DATE '2026-01-01';
SELECT DATE '2026-01-31' + INTERVAL '1 month', DATE '2026-01-01' - INTERVAL '1 day', DATE '2020-01-01' + INTERVAL '36 hours';
SELECT TIMESTAMP '2026-01-31 10:00:00' + INTERVAL '1 month', TIMESTAMP '2026-01-01 00:00:00' - INTERVAL '1 second';
SELECT TIMESTAMP '2026-01-01 10:00:00' - TIMESTAMP '2026-01-01 09:30:00', TIMESTAMP '2026-01-02' - TIMESTAMP '2026-01-01';
SELECT TIMESTAMP '2023-08-10' - TIMESTAMP '2022-07-19 08:20:38', TIMESTAMP '2022-07-19' - TIMESTAMP '2023-08-10';
SELECT INTERVAL '1 day', INTERVAL '25 hours', INTERVAL '90 minutes', INTERVAL '1 month 2 days 03:04:05', INTERVAL '1.5 seconds', INTERVAL '-1 hour';
SELECT INTERVAL '1 year 2 months', INTERVAL '13 months', INTERVAL '0', INTERVAL '1 week', INTERVAL '2 days 1 hour' * 2;
SELECT INTERVAL '1 day' = INTERVAL '24 hours', INTERVAL '1 month' = INTERVAL '30 days', INTERVAL '1 hour' < INTERVAL '59 minutes';
SELECT INTERVAL '1 day' + INTERVAL '1 hour', INTERVAL '1 day' - INTERVAL '1 hour', -INTERVAL '1 day', INTERVAL '1 hour' / 2, 2 * INTERVAL '1 minute';
SELECT date_trunc('hour', TIMESTAMP '2026-01-01 10:35:12'), date_trunc('day', TIMESTAMP '2026-01-01 10:35:12'), date_trunc('month', TIMESTAMP '2026-02-11 10:35:12'), date_trunc('year', DATE '2026-05-05');
SELECT date_trunc('week', TIMESTAMP '2026-01-01 10:00'), date_trunc('quarter', TIMESTAMP '2026-05-17'), date_trunc('minute', ts) FROM t ORDER BY id;
SELECT extract(year FROM ts), extract(month FROM ts), extract(day FROM ts), extract(hour FROM ts), extract(minute FROM ts), extract(second FROM ts) FROM t ORDER BY id;
SELECT extract(epoch FROM ts), extract(dow FROM ts), extract(doy FROM ts), extract(week FROM ts), extract(quarter FROM ts) FROM t ORDER BY id;
SELECT extract(epoch FROM INTERVAL '1 day 2 hours'), extract(hour FROM INTERVAL '26 hours'), date_part('year', DATE '2026-03-01'), date_part('epoch', TIMESTAMP '1970-01-02');
SELECT extract(epoch FROM tz), extract(hour FROM tz) FROM t ORDER BY id;
SELECT to_char(ts, 'YYYY-MM-DD HH24:MI:SS'), to_char(ts, 'DD Mon YYYY'), to_char(ts, 'HH12:MI AM'), to_char(d, 'YYYY/MM/DD'), to_char(ts, 'Day Month') FROM t ORDER BY id;
SELECT to_char(TIMESTAMP '2026-01-05 07:08:09.123456', 'YYYY MM DD HH HH12 HH24 MI SS MS US'), to_char(DATE '2026-01-05', 'D DDD IW WW Q');
SELECT to_char(TIMESTAMP '2026-12-31 23:59:59', 'FMMonth FMDD, YYYY'), to_char(DATE '2015-07-15', 'YYYY-MM-DD'), to_char(TIMESTAMP '2026-01-05 15:00', 'TMDay "at" HH:MI pm');
SELECT to_timestamp('2026-01-05 10:11:12', 'YYYY-MM-DD HH24:MI:SS'), to_date('05 Jan 2026', 'DD Mon YYYY'), to_timestamp(0), to_timestamp(1767261600.5);
SELECT make_date(2026, 2, 28), make_timestamp(2026, 2, 28, 10, 30, 15.5), make_interval(days => 3, hours => 2);
SELECT make_date(2026, 20, 1);
SELECT ts, d, tz FROM t ORDER BY id;
SELECT ts::date, d::timestamp, tz::timestamp, ts::timestamptz, d::timestamptz FROM t ORDER BY id;
SELECT CAST(ts AS TEXT), CAST(d AS TEXT), CAST(tz AS TEXT) FROM t ORDER BY id;
SELECT '2026-01-01'::date, '2026-01-01 10:00'::timestamp, '2026-01-01T10:00:00.5'::timestamp, '2026-01-01 10:00:00+02'::timestamptz, '2026-01-01 10:00:00'::timestamptz;
SELECT 'epoch'::timestamp, 'epoch'::date, '2026-01-01 24:00:00'::timestamp, 'infinity'::timestamp, '-infinity'::date;
SELECT '0044-03-15 BC'::date, '1500-06-01'::timestamp, '3000-01-01 00:00:00'::timestamp, '1600-01-01'::date - '1500-01-01'::date;
SELECT '2026-02-30'::date;
SELECT '2026-13-01 00:00'::timestamp;
SELECT date_bin(INTERVAL '15 minutes', TIMESTAMP '2026-01-01 10:37:00', TIMESTAMP '2026-01-01 00:00:00');
SELECT age(TIMESTAMP '2026-03-01', TIMESTAMP '2025-01-15'), age(DATE '2026-01-01', DATE '2025-12-01');
SELECT justify_hours(INTERVAL '27 hours'), justify_days(INTERVAL '35 days'), justify_interval(INTERVAL '1 month -1 hour');
SELECT ts > TIMESTAMP '2026-01-01', d = DATE '2026-01-01', tz < TIMESTAMPTZ '2026-01-01 00:00:00+00' FROM t ORDER BY id;
SELECT ts = d, tz = ts FROM t ORDER BY id;
SELECT max(ts), min(d), max(tz), min(tz) FROM t;
SELECT ts + INTERVAL '1 day' FROM t ORDER BY id;
SELECT tz + INTERVAL '1 hour', tz - INTERVAL '1 day' FROM t ORDER BY id;
SELECT d + 30, d - 1, d - DATE '2000-01-01' FROM t ORDER BY id;
SELECT isfinite(DATE '2026-01-01'), TIMESTAMP '2026-01-01 10:00:00.123456789';
SELECT OVERLAPS_TEST FROM (SELECT (DATE '2026-01-01', DATE '2026-02-01') OVERLAPS (DATE '2026-01-15', DATE '2026-03-01') AS OVERLAPS_TEST) q;
SELECT id FROM t WHERE ts >= '2026-01-01 10:00' ORDER BY id;
SELECT id FROM t WHERE tz < '2026-01-01 09:00+00' AND d > '2025-12-30' ORDER BY id;
SELECT id, ts BETWEEN '2025-12-31' AND '2026-01-01 10:00' FROM t ORDER BY id;
-- to_char and to_timestamp templates as PostgreSQL reads them (its
-- horology topic): patterns of digits in any case, an interval's hours
-- past a day, fields with no separator read at their width.
SELECT to_char(TIMESTAMP '2026-01-01 12:07:00', 'HH:mm'), to_char(TIMESTAMP '2026-03-04 05:06:07', 'yyyy-mm-dd hh24:mi:ss'), to_char(TIMESTAMP '2026-03-04 05:06:07', 'Month month MONTH Day dd');
SELECT to_char(INTERVAL '26 hours 5 minutes', 'HH24:MI'), to_char(INTERVAL '1 year 2 months 3 days 04:05:06.789', 'YYYY MM DD HH24 MI SS MS'), to_char(INTERVAL '15 hours', 'HH HH12 HH24');
SELECT to_timestamp('20240229134512', 'YYYYMMDDHH24MISS'), to_date('20240229', 'YYYYMMDD'), to_date('2024-02-29', 'YYYY-MM-DD'), to_timestamp('2024 2 9', 'YYYY MM DD');
SELECT to_char(INTERVAL '-26 hours', 'HH24:MI');
SELECT to_char(INTERVAL '3 days', 'Day');
SELECT extract(timezone FROM TIMESTAMPTZ '2024-01-01 00:00+00'), extract(timezone_hour FROM TIMESTAMPTZ '2024-01-01 05:00+03'), date_part('timezone_minute', TIMESTAMPTZ '2024-06-01 00:00+00'), pg_typeof(extract(timezone FROM TIMESTAMPTZ '2024-01-01 00:00+00'));
SELECT extract(timezone FROM TIMESTAMP '2024-01-01 00:00');
-- Precision and fields of timestamp and interval types (issue 72).
SELECT '2003-04-12 04:05:06.666666666'::timestamp(0), '2003-04-12 04:05:06.666666'::timestamp(2), '2003-04-12 04:05:06.666666+00'::timestamptz(1);
SELECT TIMESTAMP '1960-01-01 00:00:00.5'::timestamp(0), CAST(TIMESTAMP '2026-01-01 10:00:00.123456' AS timestamp(3));
SELECT INTERVAL '1.23456789' SECOND(2), '1 day 01:02:03.456789'::interval(1), '1 day 01:02:03.456789'::interval minute;
SELECT INTERVAL '1.5' MINUTE, INTERVAL '1 day 2 hours 3 minutes 4.5 seconds' HOUR TO MINUTE, INTERVAL '1' DAY TO HOUR, INTERVAL '2 years 3 months 4 days' YEAR, INTERVAL '-1.5' HOUR TO MINUTE;
SELECT format_type(1186, 201392127), format_type(1186, 2147418114), format_type(1186, 327679), format_type(1114, 0), format_type(1184, 3), format_type(1186, NULL);
-- Interval input spreads fractions as PostgreSQL 15 does.
SELECT INTERVAL '-1.2 year', INTERVAL '2.3 month', INTERVAL '1.5 week', INTERVAL '1.5 decades', INTERVAL '0.7 day', INTERVAL '1.5 years 2.5 months';
SELECT INTERVAL '2562047 hours', INTERVAL '-2562047 hours';
-- Columns of types with a typmod keep their values to it on every write.
SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'typmods'::regclass AND attnum > 0 ORDER BY attnum;
SELECT * FROM typmods ORDER BY id;
SELECT DATE '5000-01-01' > TIMESTAMP '2000-01-01', DATE '0100-01-01' < TIMESTAMPTZ '2000-01-01 00:00+00', TIMESTAMP '2026-01-01 10:00' = DATE '2026-01-01';
SELECT TIMESTAMP '2026-01-01 10:00' + '1 day', '1 hour' + TIMESTAMPTZ '2026-01-01 10:00+00';
