//! The Nexmark queries Sluice is measured and checked on, as
//! materialized views: the texts of `shared/reference/nexmark.sql` in
//! Sluice's dialect, with ORDER BY columns added where ties would make the
//! batch query's ROW_NUMBER() ambiguous. Shared by `tests/nexmark.rs` and
//! the benchmark beside this file.

/// A query: its name, its text, and the columns to compare (a float
/// average is rounded: its last digits follow the order of additions).
pub struct Query {
    pub name: &'static str,
    pub sql: &'static str,
    pub compare: &'static str,
}

pub const QUERIES: &[Query] = &[
    Query {
        name: "q0",
        sql: "SELECT auction, bidder, price, date_time FROM bid",
        compare: "*",
    },
    Query {
        name: "q1",
        sql: "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
        compare: "*",
    },
    Query {
        name: "q2",
        sql: "SELECT auction, price FROM bid \
              WHERE auction = 1007 OR auction = 1020 OR auction = 2001 OR auction = 2019 OR auction = 2087",
        compare: "*",
    },
    Query {
        name: "q3",
        sql: "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P on A.seller = P.id \
              WHERE A.category = 10 and (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')",
        compare: "*",
    },
    Query {
        name: "q4",
        sql: "SELECT Q.category, AVG(Q.final) as avg FROM ( \
                SELECT MAX(B.price) AS final, A.category FROM auction A, bid B \
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
                GROUP BY A.id, A.category) Q \
              GROUP BY Q.category",
        compare: "category, round(avg, 6)",
    },
    Query {
        name: "q5",
        sql: "SELECT AuctionBids.auction, AuctionBids.num FROM ( \
                SELECT bid.auction, count(*) AS num, window_start AS starttime \
                FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
                GROUP BY window_start, bid.auction) AS AuctionBids \
              JOIN ( \
                SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM ( \
                    SELECT count(*) AS num, window_start AS starttime_c \
                    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
                    GROUP BY bid.auction, window_start) AS CountBids \
                GROUP BY CountBids.starttime_c) AS MaxBids \
              ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn",
        compare: "*",
    },
    Query {
        name: "q7",
        sql: "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN ( \
                SELECT MAX(price) AS maxprice, window_end as date_time \
                FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 \
              ON B.price = B1.maxprice \
              WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
        compare: "*",
    },
    Query {
        name: "q8",
        sql: "SELECT P.id, P.name, P.starttime FROM ( \
                SELECT id, name, window_start AS starttime, window_end AS endtime \
                FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) \
                GROUP BY id, name, window_start, window_end) P \
              JOIN ( \
                SELECT seller, window_start AS starttime, window_end AS endtime \
                FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) \
                GROUP BY seller, window_start, window_end) A \
              ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
        compare: "*",
    },
    Query {
        name: "q9",
        sql: "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, \
                auction, bidder, price, bid_date_time FROM ( \
                SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, \
                ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC, B.bidder) AS rownum \
                FROM auction A, bid B \
                WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) tmp \
              WHERE rownum <= 1",
        compare: "*",
    },
    Query {
        // The side input is a table joined as any other (Flink looks it up
        // by processing time, which a view that replays exactly cannot).
        name: "q13",
        sql: "SELECT B.auction, B.bidder, B.price, B.date_time, S.value FROM bid B \
              JOIN side_input S ON B.auction % 10000 = S.key",
        compare: "*",
    },
    Query {
        // count_char(extra, 'c') is RisingWave's UDF: the length less the
        // length without the character.
        name: "q14",
        sql: "SELECT auction, bidder, 0.908 * price AS price, \
                CASE WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 \
                     THEN 'dayTime' \
                     WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 \
                     THEN 'nightTime' \
                     ELSE 'otherTime' END AS bid_time_type, \
                date_time, \
                character_length(extra) - character_length(replace(extra, 'c', '')) AS c_counts \
              FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
        compare: "*",
    },
    Query {
        name: "q15",
        sql: "SELECT to_char(date_time, 'YYYY-MM-DD') as day, count(*) AS total_bids, \
                count(*) filter (where price < 10000) AS rank1_bids, \
                count(distinct bidder) AS total_bidders, \
                count(distinct auction) filter (where price >= 1000000) AS rank3_auctions \
              FROM bid GROUP BY to_char(date_time, 'YYYY-MM-DD')",
        compare: "*",
    },
    Query {
        name: "q16",
        sql: "SELECT channel, to_char(date_time, 'YYYY-MM-DD') AS day, \
                max(to_char(date_time, 'HH:mm')) AS minute, \
                count(*) AS total_bids, \
                count(*) filter (where price < 10000) AS rank1_bids, \
                count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids, \
                count(*) filter (where price >= 1000000) AS rank3_bids, \
                count(distinct bidder) AS total_bidders, \
                count(distinct bidder) filter (where price < 10000) AS rank1_bidders, \
                count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders, \
                count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders, \
                count(distinct auction) AS total_auctions, \
                count(distinct auction) filter (where price < 10000) AS rank1_auctions, \
                count(distinct auction) filter (where price >= 10000 and price < 1000000) AS rank2_auctions, \
                count(distinct auction) filter (where price >= 1000000) AS rank3_auctions \
              FROM bid GROUP BY channel, to_char(date_time, 'YYYY-MM-DD')",
        compare: "*",
    },
    Query {
        name: "q17",
        sql: "SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, \
                min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price \
              FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
        compare: "auction, day, total_bids, min_price, max_price, round(avg_price, 6), sum_price",
    },
    Query {
        name: "q18",
        sql: "SELECT auction, bidder, price, channel, url, date_time, extra FROM ( \
                SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, extra) AS rank_number \
                FROM bid) t \
              WHERE rank_number <= 1",
        compare: "*",
    },
    Query {
        name: "q19",
        sql: "SELECT * FROM ( \
                SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time, bidder, extra) AS rank_number \
                FROM bid) t \
              WHERE rank_number <= 10",
        compare: "*",
    },
    Query {
        name: "q20",
        sql: "SELECT auction, bidder, price, channel, url, B.date_time as bid_date_time, \
                item_name, description, initial_bid, reserve, A.date_time as auction_date_time, expires, seller, category \
              FROM bid AS B INNER JOIN auction AS A on B.auction = A.id WHERE A.category = 10",
        compare: "*",
    },
    Query {
        name: "q21",
        sql: "SELECT auction, bidder, price, channel, \
                CASE WHEN LOWER(channel) = 'apple' THEN '0' WHEN LOWER(channel) = 'google' THEN '1' \
                     WHEN LOWER(channel) = 'facebook' THEN '2' WHEN LOWER(channel) = 'baidu' THEN '3' \
                     ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] END AS channel_id \
              FROM bid \
              WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] is not null \
                 or LOWER(channel) in ('apple', 'google', 'facebook', 'baidu')",
        compare: "*",
    },
    Query {
        name: "q22",
        sql: "SELECT auction, bidder, price, channel, split_part(url, '/', 4) as dir1, \
                split_part(url, '/', 5) as dir2, split_part(url, '/', 6) as dir3 FROM bid",
        compare: "*",
    },
];
