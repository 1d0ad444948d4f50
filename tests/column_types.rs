//! INTERVAL and TIME columns end to end: DDL, INSERT, COPY in text, CSV
//! and binary, the wire in text and binary, views and their checkpoints
//! across SIGKILL, closed segments in the object store, and pg_type. Their
//! answers are compared with PostgreSQL's in the differential views suite
//! (the `spans` table).

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut};
use common::{scalar, text_rows, Server};
use futures::{pin_mut, SinkExt, StreamExt};
use tokio_postgres::types::{FromSql, Type};

/// An interval as PostgreSQL's binary form carries it.
#[derive(Debug, PartialEq)]
struct Interval {
    micros: i64,
    days: i32,
    months: i32,
}

impl<'a> FromSql<'a> for Interval {
    fn from_sql(
        _: &Type,
        mut raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        if raw.len() != 16 {
            return Err("an interval is 16 bytes".into());
        }
        Ok(Interval {
            micros: raw.get_i64(),
            days: raw.get_i32(),
            months: raw.get_i32(),
        })
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

const ROWS: &str = "(1, '1 day 02:00:00', '10:30:00'), (2, NULL, NULL), \
    (3, '-3 mons +4 days 00:00:01.5', '23:59:59.999999'), (4, '1 year 2 mons', '00:00:00')";

const EXPECTED: [&str; 4] = [
    "1|1 day 02:00:00|10:30:00",
    "2|NULL|NULL",
    "3|-3 mons +4 days 00:00:01.5|23:59:59.999999",
    "4|1 year 2 mons|00:00:00",
];

/// Copies `table`'s rows out with `COPY ... TO STDOUT` in text and in CSV,
/// and each back into a new table `copied` of `columns`, which must then
/// hold `expected` (its columns read in order, by id); `copied` is dropped
/// after each.
async fn copy_round_trip(
    c: &tokio_postgres::Client,
    table: &str,
    columns: &str,
    expected: &[&str],
) {
    let names: Vec<&str> = columns
        .split(", ")
        .filter_map(|c| c.split_whitespace().next())
        .collect();
    for format in ["", " WITH (FORMAT csv)"] {
        c.batch_execute(&format!("CREATE TABLE copied ({columns})"))
            .await
            .unwrap();
        let out = c
            .copy_out(&format!(
                "COPY (SELECT * FROM {table} ORDER BY id) TO STDOUT{format}"
            ))
            .await
            .unwrap();
        pin_mut!(out);
        let mut data = Vec::new();
        while let Some(chunk) = out.next().await {
            data.extend_from_slice(&chunk.unwrap());
        }
        let sink = c
            .copy_in(&format!("COPY copied FROM STDIN{format}"))
            .await
            .unwrap();
        pin_mut!(sink);
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        assert_eq!(sink.finish().await.unwrap(), expected.len() as u64);
        assert_eq!(
            text_rows(
                c,
                &format!("SELECT {} FROM copied ORDER BY id", names.join(", "))
            )
            .await,
            expected,
            "COPY{format}"
        );
        c.batch_execute("DROP TABLE copied").await.unwrap();
    }
}

/// Sends `data` through `sql` (a `COPY ... FROM STDIN`); the rows copied.
async fn copy_rows(c: &tokio_postgres::Client, sql: &str, data: &[u8]) -> u64 {
    let sink = c.copy_in(sql).await.unwrap();
    pin_mut!(sink);
    sink.send(bytes::Bytes::copy_from_slice(data))
        .await
        .unwrap();
    sink.finish().await.unwrap()
}

/// Waits (up to 30 s) until every partition of `table` has a segment in
/// the object store.
async fn wait_for_remote_segments(c: &tokio_postgres::Client, table: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar(
        c,
        &format!("SELECT CAST(MIN(remote_segments) >= 1 AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = '{table}'"),
    )
    .await
        == 0
    {
        assert!(Instant::now() < deadline, "segments of {table} did not move");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn interval_and_time_columns_round_trip_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "20000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE spans (id INT, d INTERVAL, t TIME) WITH (partitions = 2);
         CREATE TABLE from_binary (id INT, d INTERVAL, t TIME);
         INSERT INTO spans VALUES {ROWS};
         CREATE MATERIALIZED VIEW span_totals AS SELECT sum(d) AS total, max(t) AS latest, count(*) AS n FROM spans;
         CREATE MATERIALIZED VIEW span_rows AS SELECT id, d * 2 AS twice, t + INTERVAL '1 hour' AS later FROM spans;
         FLUSH"
    ))
    .await
    .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT id, d, t FROM spans ORDER BY id").await,
        EXPECTED
    );

    // The catalog names the types as PostgreSQL does.
    assert_eq!(
        text_rows(
            &c,
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'spans' ORDER BY ordinal_position"
        )
        .await,
        ["id|integer", "d|interval", "t|time without time zone"]
    );
    assert_eq!(
        text_rows(
            &c,
            "SELECT typname FROM pg_type WHERE oid IN (1083, 1186) ORDER BY oid"
        )
        .await,
        ["time", "interval"]
    );

    // COPY out in text and CSV, and back in.
    copy_round_trip(&c, "spans", "id INT, d INTERVAL, t TIME", &EXPECTED).await;

    // Binary COPY in: PostgreSQL's binary forms of interval and time.
    let mut data = bytes::BytesMut::new();
    data.put_slice(b"PGCOPY\n\xff\r\n\0");
    data.put_i32(0);
    data.put_i32(0);
    data.put_i16(3);
    data.put_i32(4);
    data.put_i32(9);
    data.put_i32(16);
    data.put_i64(1_500_000);
    data.put_i32(-2);
    data.put_i32(14);
    data.put_i32(8);
    data.put_i64(3_600_000_000 + 1);
    data.put_i16(-1);
    assert_eq!(
        copy_rows(&c, "COPY from_binary FROM STDIN (FORMAT binary)", &data).await,
        1
    );
    assert_eq!(
        text_rows(&c, "SELECT id, d, t FROM from_binary").await,
        ["9|1 year 2 mons -2 days +00:00:01.5|01:00:00.000001"]
    );

    // A NULL interval is NULL in binary too (arrow-pg's encoder sent a
    // zero interval).
    let row = c
        .query_one(
            "SELECT CAST(NULL AS interval), d FROM spans WHERE id = 3",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<Interval>>(0), None);
    // The wire in binary: tokio-postgres asks for binary results.
    let row = c
        .query_one("SELECT d, t FROM spans WHERE id = 3", &[])
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, Interval>(0),
        Interval {
            micros: 1_500_000,
            days: 4,
            months: -3
        }
    );
    assert_eq!(
        row.get::<_, chrono::NaiveTime>(1),
        chrono::NaiveTime::from_hms_micro_opt(23, 59, 59, 999_999).unwrap()
    );
    // A bound parameter of each type, in binary.
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM spans WHERE t < $1",
            &[&chrono::NaiveTime::from_hms_opt(12, 0, 0).unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);

    // Enough rows to close segments and move them to the object store.
    for i in 0..20 {
        c.batch_execute(&format!(
            "INSERT INTO spans SELECT 100 + {i} * 500 + value, INTERVAL '1 minute' * value, TIME '00:00:01' + INTERVAL '1 second' * value FROM generate_series(0, 499) AS s(value)"
        ))
        .await
        .unwrap();
    }
    wait_for_remote_segments(&c, "spans").await;
    c.batch_execute("FLUSH").await.unwrap();
    let before = text_rows(&c, "SELECT * FROM span_totals").await;
    assert_eq!(
        text_rows(&c, "SELECT id, d, t FROM spans WHERE id < 100 ORDER BY id").await,
        EXPECTED
    );
    let sums = text_rows(&c, "SELECT sum(d), max(t), count(*) FROM spans").await;
    assert_eq!(before, sums);

    // SIGKILL: views come back from their checkpoints, the table from the
    // log and the object store; a new view backfills across both.
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(text_rows(&c, "SELECT * FROM span_totals").await, before);
    assert_eq!(
        text_rows(&c, "SELECT id, d, t FROM spans WHERE id < 100 ORDER BY id").await,
        EXPECTED
    );
    assert_eq!(
        text_rows(
            &c,
            "SELECT id, twice, later FROM span_rows WHERE id IN (1, 3) ORDER BY id"
        )
        .await,
        [
            "1|2 days 04:00:00|11:30:00",
            "3|-6 mons +8 days 00:00:03|00:59:59.999999"
        ]
    );
    c.batch_execute(
        "CREATE MATERIALIZED VIEW later_totals AS SELECT sum(d) AS total, max(t) AS latest, count(*) AS n FROM spans; FLUSH",
    )
    .await
    .unwrap();
    assert_eq!(text_rows(&c, "SELECT * FROM later_totals").await, before);
}

#[tokio::test]
async fn array_columns_round_trip_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "20000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE bags (id INT, xs INT[], tags TEXT[]) WITH (partitions = 2);
         INSERT INTO bags VALUES (1, '{1,2,NULL}', '{a,\"b c\",NULL,\"NULL\"}'), (2, '{}', NULL), (3, ARRAY[7, 7], ARRAY['x']);
         CREATE MATERIALIZED VIEW tag_counts AS SELECT t, count(*) AS c FROM bags, unnest(bags.tags) AS t GROUP BY t;
         CREATE MATERIALIZED VIEW with_seven AS SELECT id, xs FROM bags WHERE 7 = ANY(xs);
         FLUSH",
    )
    .await
    .unwrap();
    let expected = [
        "1|{1,2,NULL}|{a,\"b c\",NULL,\"NULL\"}",
        "2|{}|NULL",
        "3|{7,7}|{x}",
    ];
    assert_eq!(
        text_rows(&c, "SELECT id, xs, tags FROM bags ORDER BY id").await,
        expected
    );
    assert_eq!(
        text_rows(
            &c,
            "SELECT column_name, data_type, udt_name FROM information_schema.columns WHERE table_name = 'bags' ORDER BY ordinal_position"
        )
        .await,
        ["id|integer|int4", "xs|ARRAY|_int4", "tags|ARRAY|_text"]
    );

    // COPY out in text and CSV, and back in.
    copy_round_trip(&c, "bags", "id INT, xs INT[], tags TEXT[]", &expected).await;
    c.batch_execute("CREATE TABLE copied (id INT, xs INT[], tags TEXT[])")
        .await
        .unwrap();

    // Binary COPY in, as tokio-postgres writes arrays, and binary results
    // and parameters.
    let sink = c
        .copy_in("COPY copied FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    let writer = tokio_postgres::binary_copy::BinaryCopyInWriter::new(
        sink,
        &[Type::INT4, Type::INT4_ARRAY, Type::TEXT_ARRAY],
    );
    pin_mut!(writer);
    let xs: Vec<Option<i32>> = vec![Some(4), None];
    let tags: Vec<Option<&str>> = vec![Some("q \"r\""), None];
    writer.as_mut().write(&[&9i32, &xs, &tags]).await.unwrap();
    writer.finish().await.unwrap();
    let row = c
        .query_one("SELECT xs, tags FROM copied WHERE id = $1", &[&9i32])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Vec<Option<i32>>>(0), xs);
    assert_eq!(
        row.get::<_, Vec<Option<String>>>(1),
        [Some("q \"r\"".to_string()), None]
    );
    let ids: Vec<i32> = c
        .query(
            "SELECT id FROM bags WHERE id = ANY($1) ORDER BY id",
            &[&vec![1i32, 3]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 3]);
    c.execute(
        "INSERT INTO bags VALUES ($1, $2, $3)",
        &[&4i32, &vec![7i32], &vec!["a"]],
    )
    .await
    .unwrap();

    // A bad element is refused and nothing of the statement is kept.
    let err = c
        .batch_execute("INSERT INTO bags VALUES (5, '{1}', NULL), (6, '{1,x}', NULL)")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "22P02");
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM bags WHERE id >= 5").await,
        0
    );

    // Enough rows to close segments and move them to the object store.
    for i in 0..10 {
        c.batch_execute(&format!(
            "INSERT INTO bags SELECT 100 + {i} * 500 + value, ARRAY[value, value + 1], ARRAY['t' || (value % 3)::text] FROM generate_series(0, 499) AS s(value)"
        ))
        .await
        .unwrap();
    }
    wait_for_remote_segments(&c, "bags").await;
    c.batch_execute("FLUSH").await.unwrap();
    let counts = text_rows(&c, "SELECT * FROM tag_counts ORDER BY t").await;
    assert_eq!(
        counts,
        text_rows(
            &c,
            "SELECT t, count(*) FROM bags, unnest(bags.tags) AS t GROUP BY t ORDER BY t"
        )
        .await
    );

    // SIGKILL: the views come back from their checkpoints, the table from
    // the log and the object store.
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM tag_counts ORDER BY t").await,
        counts
    );
    assert_eq!(
        text_rows(&c, "SELECT id, xs, tags FROM bags WHERE id < 4 ORDER BY id").await,
        expected
    );
    let seven = text_rows(&c, "SELECT * FROM with_seven ORDER BY id").await;
    assert_eq!(seven[..2], ["3|{7,7}", "4|{7}"]);
    assert_eq!(
        seven,
        text_rows(&c, "SELECT id, xs FROM bags WHERE 7 = ANY(xs) ORDER BY id").await
    );
}

/// Columns of `timestamp(p)`, `timestamptz(p)` and intervals with fields or
/// a precision keep every value written to them to the typmod, through
/// INSERT, INSERT ... SELECT, COPY in text, CSV and binary, as PostgreSQL 15
/// does (each expected row was read off PostgreSQL); COPY out in text
/// writes timestamps as PostgreSQL's text.
#[tokio::test]
async fn typmod_columns_keep_their_values_to_the_typmod() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE tm (id INT, t TIMESTAMP(0), tz TIMESTAMPTZ(2), i INTERVAL HOUR TO MINUTE, j INTERVAL(1), k INTERVAL YEAR);
         INSERT INTO tm VALUES (1, '2003-04-12 04:05:06.666', '2003-04-12 04:05:06.666+00', '1 day 2 hours 3 minutes 4.5 seconds', '1.26 seconds', '2 years 5 months');
         INSERT INTO tm SELECT 2, t + INTERVAL '0.5 second', tz, i, j, k FROM tm WHERE id = 1;",
    )
    .await
    .unwrap();
    let text = b"3\t2003-04-12 04:05:06.5\t2003-04-12 04:05:06.555+00\t01:02:03\t00:00:01.25\t1 year 11 mons\n";
    assert_eq!(copy_rows(&c, "COPY tm FROM STDIN", &text[..]).await, 1);
    let csv = b"4,2003-04-12 04:05:06.4,2003-04-12 04:05:06.554+00,-01:02:59,-00:00:01.25,-1 year -11 mons\n";
    assert_eq!(
        copy_rows(&c, "COPY tm FROM STDIN (FORMAT csv)", &csv[..]).await,
        1
    );
    // Binary: id 5 and a timestamp(0) of 1.5 s after 2000-01-01.
    let mut data = bytes::BytesMut::new();
    data.put_slice(b"PGCOPY\n\xff\r\n\0");
    data.put_i32(0);
    data.put_i32(0);
    data.put_i16(2);
    data.put_i32(4);
    data.put_i32(5);
    data.put_i32(8);
    data.put_i64(1_500_000);
    data.put_i16(-1);
    assert_eq!(
        copy_rows(&c, "COPY tm (id, t) FROM STDIN (FORMAT binary)", &data).await,
        1
    );
    assert_eq!(
        text_rows(&c, "SELECT * FROM tm ORDER BY id").await,
        [
            "1|2003-04-12 04:05:07|2003-04-12 04:05:06.67+00|1 day 02:03:00|00:00:01.3|2 years",
            "2|2003-04-12 04:05:08|2003-04-12 04:05:06.67+00|1 day 02:03:00|00:00:01.3|2 years",
            "3|2003-04-12 04:05:07|2003-04-12 04:05:06.56+00|01:02:00|00:00:01.3|1 year",
            "4|2003-04-12 04:05:06|2003-04-12 04:05:06.55+00|-01:02:00|-00:00:01.3|-1 years",
            "5|2000-01-01 00:00:02|NULL|NULL|NULL|NULL",
        ]
    );
    let out = c
        .copy_out("COPY (SELECT id, t, tz FROM tm WHERE id <= 2 ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    pin_mut!(out);
    let mut text = Vec::new();
    while let Some(chunk) = out.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "1\t2003-04-12 04:05:07\t2003-04-12 04:05:06.67+00\n2\t2003-04-12 04:05:08\t2003-04-12 04:05:06.67+00\n"
    );
}
