//! Random SQL that PostgreSQL 15 accepts, over one table `f` of random
//! rows with edge values (NULLs, NaN, infinities, the ends of each
//! integer's range, year 1 and year 9999). The differential suite sends
//! each query to Sluice and PostgreSQL and compares the answers; the
//! hostile suite sends them to Sluice alone and checks that it lives.
//!
//! Every expression has a PostgreSQL type the generator tracks, so a query
//! fails only where PostgreSQL would fail on the rows too (a division by
//! zero, an overflow, a bad text-to-number cast), never on its types.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The table every generated query reads; Sluice's gets three partitions.
pub const FUZZ_TABLE: &str = "CREATE TABLE f (i INT, b BIGINT, d DOUBLE PRECISION, \
     n NUMERIC(12,2), s TEXT, ts TIMESTAMP, flag BOOLEAN, dt DATE)";

/// The seed of the generator: `SLUICE_FUZZ_SEED` or a fixed default.
pub fn fuzz_seed() -> u64 {
    std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261130)
}

pub fn rng() -> StdRng {
    StdRng::seed_from_u64(fuzz_seed())
}

fn pick<T: Clone>(rng: &mut StdRng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())].clone()
}

/// `INSERT INTO f` of `n` random rows.
pub fn insert_rows(rng: &mut StdRng, n: usize) -> String {
    let rows: Vec<String> = (0..n).map(|_| random_row(rng)).collect();
    format!("INSERT INTO f VALUES {}", rows.join(", "))
}

fn random_row(rng: &mut StdRng) -> String {
    let mut value = |choices: &[&str]| -> String {
        if rng.random_range(0..6) == 0 {
            "NULL".into()
        } else {
            pick(rng, choices).to_string()
        }
    };
    let fields = [
        value(&[
            "0",
            "1",
            "-1",
            "7",
            "42",
            "2147483647",
            "-2147483648",
            "1000",
        ]),
        value(&[
            "0",
            "3",
            "-3",
            "9223372036854775807",
            "-9223372036854775807",
            "1099511627776",
        ]),
        value(&[
            "0.5",
            "-2.25",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "1e300",
            "3.0",
            "0.1",
        ]),
        value(&[
            "0.00",
            "1.25",
            "-999999999.99",
            "999999999.99",
            "0.01",
            "2.50",
        ]),
        value(&[
            "''",
            "'a'",
            "'O''Brien'",
            "'é ü'",
            "'zz'",
            "'42'",
            "'NaN'",
            "' 7 '",
        ]),
        value(&[
            "'1970-01-01 00:00:00'",
            "'2026-01-01 10:00:00'",
            "'2026-01-01 10:00:59.5'",
            "'0001-01-01 00:00:00'",
            "'9999-12-31 23:59:59'",
            "'2000-02-29 12:34:56.789'",
        ]),
        value(&["true", "false"]),
        value(&[
            "'1970-01-01'",
            "'2026-01-01'",
            "'0001-01-01'",
            "'9999-12-31'",
            "'2000-02-29'",
        ]),
    ];
    format!("({})", fields.join(", "))
}

/// The PostgreSQL type of a generated expression.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int4,
    Int8,
    Float8,
    Numeric,
    Text,
    Timestamp,
    Date,
    Bool,
    Interval,
}

use Kind::*;

const COLUMNS: [(&str, Kind); 8] = [
    ("i", Int4),
    ("b", Int8),
    ("d", Float8),
    ("n", Numeric),
    ("s", Text),
    ("ts", Timestamp),
    ("flag", Bool),
    ("dt", Date),
];

const NUMBERS: [Kind; 4] = [Int4, Int8, Float8, Numeric];

fn is_number(k: Kind) -> bool {
    NUMBERS.contains(&k)
}

/// The type PostgreSQL gives `a op b` for arithmetic on numbers.
fn arithmetic(a: Kind, b: Kind) -> Kind {
    if a == Float8 || b == Float8 {
        Float8
    } else if a == Numeric || b == Numeric {
        Numeric
    } else if a == Int8 || b == Int8 {
        Int8
    } else {
        Int4
    }
}

/// Random queries over `f`.
pub struct QueryGen<'a> {
    pub rng: &'a mut StdRng,
    /// Qualifies column references (`a.` in a self-join).
    prefix: &'static str,
}

impl<'a> QueryGen<'a> {
    pub fn new(rng: &'a mut StdRng) -> Self {
        QueryGen { rng, prefix: "" }
    }

    fn column(&mut self, kind: Kind) -> String {
        let of_kind: Vec<&str> = COLUMNS
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(c, _)| *c)
            .collect();
        match of_kind.as_slice() {
            [] => self.literal(kind),
            cols => format!("{}{}", self.prefix, pick(self.rng, cols)),
        }
    }

    fn column_of(&mut self, kinds: &[Kind]) -> String {
        let k = pick(self.rng, kinds);
        self.column(k)
    }

    fn literal(&mut self, kind: Kind) -> String {
        if self.rng.random_range(0..12) == 0 {
            // A NULL of the kind, typed so PostgreSQL resolves the same
            // functions.
            return format!("CAST(NULL AS {})", type_name(kind));
        }
        let choices: &[&str] = match kind {
            Int4 => &["0", "1", "-1", "2147483647", "3", "-2147483648", "10"],
            Int8 => &["9223372036854775807", "CAST(2 AS BIGINT)", "4294967296"],
            Float8 => &[
                "CAST(0.5 AS DOUBLE PRECISION)",
                "CAST('NaN' AS DOUBLE PRECISION)",
                "CAST('Infinity' AS DOUBLE PRECISION)",
                "CAST(1e308 AS DOUBLE PRECISION)",
                "CAST(-2.5 AS DOUBLE PRECISION)",
            ],
            Numeric => &["1.25", "-99999999999.99", "0.0", "0.001", "12345.678"],
            Text => &[
                "''",
                "'a'",
                "'O''Brien'",
                "'42'",
                "'2026-01-01'",
                "'NaN'",
                "'true'",
                "'ß'",
            ],
            Timestamp => &[
                "TIMESTAMP '2026-01-01 10:00:00'",
                "TIMESTAMP '1970-01-01 00:00:00'",
                "TIMESTAMP '9999-12-31 23:59:59'",
                "TIMESTAMP '2024-02-29 23:59:59.999999'",
            ],
            Bool => &["true", "false"],
            Date => &[
                "DATE '2026-01-01'",
                "DATE '0001-01-01'",
                "DATE '2024-02-29'",
            ],
            Interval => &[
                "INTERVAL '1 day'",
                "INTERVAL '1 month'",
                "INTERVAL '-2 hours 30 minutes'",
                "INTERVAL '1 year 2 mons 3 days 04:05:06.5'",
                "INTERVAL '0'",
            ],
        };
        pick(self.rng, choices).to_string()
    }

    /// A column or a literal of the kind.
    fn leaf(&mut self, kind: Kind) -> String {
        if self.rng.random_range(0..3) == 0 {
            self.literal(kind)
        } else {
            self.column(kind)
        }
    }

    fn number_kind(&mut self) -> Kind {
        pick(self.rng, &NUMBERS)
    }

    /// A number of some kind and the kind it has.
    fn number(&mut self, depth: u32) -> (String, Kind) {
        let k = self.number_kind();
        (self.expr(k, depth), k)
    }

    /// An expression of the kind, up to `depth` deep.
    fn expr(&mut self, kind: Kind, depth: u32) -> String {
        if depth == 0 || self.rng.random_range(0..3) == 0 {
            return self.leaf(kind);
        }
        let d = depth - 1;
        match kind {
            Bool => self.boolean(d),
            Text => self.text(d),
            Timestamp => match self.rng.random_range(0..4) {
                0 => format!(
                    "date_bin(INTERVAL '15 minutes', {}, TIMESTAMP '2001-01-01')",
                    self.expr(Timestamp, d)
                ),
                1 => format!("({} + {})", self.expr(Timestamp, d), self.expr(Interval, d)),
                2 => format!(
                    "date_trunc('{}', {})",
                    pick(self.rng, &["hour", "day", "month", "year", "week"]),
                    self.expr(Timestamp, d)
                ),
                _ => format!("({} + {})", self.expr(Date, d), self.expr(Interval, d)),
            },
            Date => match self.rng.random_range(0..3) {
                0 => format!("CAST({} AS DATE)", self.expr(Timestamp, d)),
                1 => format!("({} + {})", self.expr(Date, d), self.small_int()),
                _ => format!("({} - {})", self.expr(Date, d), self.small_int()),
            },
            Interval => match self.rng.random_range(0..4) {
                0 => format!(
                    "({} - {})",
                    self.expr(Timestamp, d),
                    self.expr(Timestamp, d)
                ),
                1 => format!("({} * {})", self.expr(Interval, d), self.small_int()),
                2 => format!("justify_hours({})", self.expr(Interval, d)),
                _ => format!("({} + {})", self.expr(Interval, d), self.expr(Interval, d)),
            },
            Int4 | Int8 | Float8 | Numeric => self.arith(kind, d),
        }
    }

    fn small_int(&mut self) -> String {
        pick(self.rng, &["0", "1", "7", "-30", "365"]).to_string()
    }

    fn boolean(&mut self, d: u32) -> String {
        match self.rng.random_range(0..10) {
            0 => format!("({} AND {})", self.expr(Bool, d), self.expr(Bool, d)),
            1 => format!("({} OR {})", self.expr(Bool, d), self.expr(Bool, d)),
            2 => format!("(NOT {})", self.expr(Bool, d)),
            3 => {
                let op = pick(self.rng, &["=", "<>", "<", "<=", ">", ">="]);
                let (a, b) = if self.rng.random_bool(0.5) {
                    (self.number(d).0, self.number(d).0)
                } else {
                    let k = pick(self.rng, &[Text, Timestamp, Date, Interval, Bool]);
                    (self.expr(k, d), self.expr(k, d))
                };
                format!("({a} {op} {b})")
            }
            4 => {
                let k = pick(
                    self.rng,
                    &[Int4, Int8, Float8, Numeric, Text, Timestamp, Bool],
                );
                let test = pick(self.rng, &["IS NULL", "IS NOT NULL"]);
                format!("({} {test})", self.expr(k, d))
            }
            5 => format!(
                "({} BETWEEN {} AND {})",
                self.number(d).0,
                self.small_int(),
                self.small_int()
            ),
            6 => format!(
                "({} IN ({}, {}, {}))",
                self.expr(Int4, d),
                self.literal(Int4),
                self.literal(Int4),
                self.literal(Int4)
            ),
            7 => format!(
                "({} {} '{}')",
                self.expr(Text, d),
                pick(self.rng, &["LIKE", "NOT LIKE", "ILIKE"]),
                pick(self.rng, &["%a%", "_", "", "O%", "%\\_%"])
            ),
            8 => format!(
                "({} IS DISTINCT FROM {})",
                self.expr(Int4, d),
                self.expr(Int4, d)
            ),
            _ => format!(
                "({}i IN (SELECT i FROM f WHERE {}))",
                self.prefix,
                QueryGen::new(self.rng).expr(Bool, d)
            ),
        }
    }

    fn text(&mut self, d: u32) -> String {
        match self.rng.random_range(0..9) {
            0 => format!("({} || {})", self.expr(Text, d), self.expr(Text, d)),
            1 => format!(
                "{}({})",
                pick(
                    self.rng,
                    &["upper", "lower", "initcap", "btrim", "reverse", "md5"]
                ),
                self.expr(Text, d)
            ),
            2 => format!(
                "substr({}, {}, {})",
                self.expr(Text, d),
                self.small_int(),
                pick(self.rng, &["0", "2", "100"])
            ),
            3 => {
                let k = pick(
                    self.rng,
                    &[Int4, Int8, Float8, Numeric, Timestamp, Date, Bool, Interval],
                );
                format!("CAST({} AS TEXT)", self.expr(k, d))
            }
            4 => format!("coalesce({}, 'none')", self.expr(Text, d)),
            5 => format!(
                "CASE WHEN {} THEN {} ELSE {} END",
                self.expr(Bool, d),
                self.expr(Text, d),
                self.expr(Text, d)
            ),
            6 => format!(
                "{}({}, {}, '*')",
                pick(self.rng, &["lpad", "rpad"]),
                self.expr(Text, d),
                pick(self.rng, &["0", "3", "6"])
            ),
            7 => format!(
                "to_char({}, '{}')",
                self.expr(Timestamp, d),
                pick(
                    self.rng,
                    &[
                        "YYYY-MM-DD HH24:MI:SS",
                        "Dy DD Mon YYYY",
                        "HH12:MI AM",
                        "IYYY-IW",
                        "Q"
                    ]
                )
            ),
            _ => format!(
                "replace({}, '{}', '-')",
                self.expr(Text, d),
                pick(self.rng, &["a", "''", "z"])
            ),
        }
    }

    fn arith(&mut self, kind: Kind, d: u32) -> String {
        match self.rng.random_range(0..9) {
            // An operator whose operand types give `kind`.
            0..=3 => {
                let (a, b) = self.operands(kind);
                let (a, b) = (self.expr(a, d), self.expr(b, d));
                let ops: &[&str] = if kind == Float8 {
                    &["+", "-", "*", "/"]
                } else {
                    &["+", "-", "*", "/", "%"]
                };
                format!("({a} {} {b})", pick(self.rng, ops))
            }
            4 => format!("abs({})", self.expr(kind, d)),
            5 => {
                // A cast into `kind` from a type that casts to it.
                let from = pick(self.rng, &[Int4, Int8, Float8, Numeric, Text]);
                let to = match kind {
                    Int4 => pick(self.rng, &["INT", "SMALLINT"]),
                    Int8 => "BIGINT",
                    Float8 => "DOUBLE PRECISION",
                    _ => pick(self.rng, &["NUMERIC(12,2)", "NUMERIC", "NUMERIC(5,1)"]),
                };
                let inner = format!("CAST({} AS {to})", self.expr(from, d));
                if to == "SMALLINT" {
                    format!("CAST({inner} AS INT)")
                } else {
                    inner
                }
            }
            6 => match kind {
                Int4 => format!("length({})", self.expr(Text, d)),
                Int8 => format!(
                    "(SELECT count(*) FROM f WHERE {})",
                    QueryGen::new(self.rng).expr(Bool, d)
                ),
                Float8 => format!(
                    "{}({})",
                    pick(self.rng, &["sqrt", "ln", "exp", "floor", "round"]),
                    self.expr(Float8, d)
                ),
                _ => format!(
                    "round({}, {})",
                    self.expr(Numeric, d),
                    pick(self.rng, &["0", "1", "-1", "3"])
                ),
            },
            // (Not of an outer column: max(a.x) would be an aggregate of
            // the outer query, which PostgreSQL then groups.)
            7 => {
                let mut inner = QueryGen::new(self.rng);
                format!(
                    "(SELECT max({}) FROM f WHERE {})",
                    inner.column(kind),
                    inner.expr(Bool, d)
                )
            }
            _ => format!(
                "CASE WHEN {} THEN {} END",
                self.expr(Bool, d),
                self.expr(kind, d)
            ),
        }
    }

    /// Two operand kinds whose arithmetic gives `kind`.
    fn operands(&mut self, kind: Kind) -> (Kind, Kind) {
        let pairs: Vec<(Kind, Kind)> = NUMBERS
            .iter()
            .flat_map(|a| NUMBERS.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| arithmetic(*a, *b) == kind)
            .collect();
        pick(self.rng, &pairs)
    }

    /// An output column: any kind of expression.
    fn output(&mut self, depth: u32) -> String {
        let k = pick(
            self.rng,
            &[
                Int4, Int8, Float8, Numeric, Text, Timestamp, Date, Bool, Interval,
            ],
        );
        self.expr(k, depth)
    }

    /// A condition over `f`'s columns (qualified by `prefix`, as `a.`),
    /// which may be NULL: NULL columns, NULL literals, comparisons, IN
    /// lists and IN subqueries over `f` itself.
    pub fn predicate(&mut self, prefix: &'static str) -> String {
        self.prefix = prefix;
        let p = self.expr(Bool, 3);
        self.prefix = "";
        p
    }

    /// One query over `f`.
    pub fn query(&mut self) -> String {
        match self.rng.random_range(0..7) {
            // Projection and filter.
            0 | 1 => {
                let cols: Vec<String> = (0..self.rng.random_range(1..4))
                    .map(|_| self.output(3))
                    .collect();
                format!(
                    "SELECT {} FROM f WHERE {}",
                    cols.join(", "),
                    self.expr(Bool, 3)
                )
            }
            // Aggregates over a grouping key.
            2 => {
                let kind = pick(self.rng, &[Text, Bool, Int4, Date, Numeric]);
                let key = self.expr(kind, 2);
                let agg = self.aggregate();
                format!(
                    "SELECT {key}, {agg} FROM f WHERE {} GROUP BY 1",
                    self.expr(Bool, 2)
                )
            }
            // A self-join on an equality.
            3 => {
                let c = pick(self.rng, &["i", "s", "flag", "dt", "n"]);
                self.prefix = "a.";
                let out = self.output(2);
                let filter = self.expr(Bool, 1);
                self.prefix = "";
                let kind = pick(self.rng, &["JOIN", "LEFT JOIN", "FULL JOIN"]);
                format!("SELECT {out}, b.i FROM f AS a {kind} f AS b ON a.{c} = b.{c} WHERE {filter}")
            }
            // A subquery in FROM.
            4 => format!(
                "SELECT count(*) + sum(CASE WHEN i > 0 THEN 1 ELSE 0 END) FROM \
                 (SELECT i, s, d FROM f WHERE {}) AS sub",
                self.expr(Bool, 2)
            ),
            // Event-time windows.
            5 => format!(
                "SELECT date_bin(INTERVAL '1 minute', ts, TIMESTAMP '2001-01-01'), {} FROM f \
                 WHERE ts BETWEEN TIMESTAMP '2000-01-01 00:00:00' AND TIMESTAMP '2100-01-01 00:00:00' \
                 GROUP BY 1",
                pick(self.rng, &["count(*)", "sum(i)", "max(s)", "min(n)", "avg(n)"])
            ),
            // Ordered and limited.
            _ => {
                let k = pick(self.rng, &[Int4, Text, Numeric, Date]);
                let key = self.expr(k, 2);
                format!(
                    "SELECT {key} AS k, count(*) AS c FROM f GROUP BY 1 ORDER BY 1 {} NULLS {} LIMIT {}",
                    pick(self.rng, &["ASC", "DESC"]),
                    pick(self.rng, &["FIRST", "LAST"]),
                    pick(self.rng, &["1", "3", "100"])
                )
            }
        }
    }

    fn aggregate(&mut self) -> String {
        match self.rng.random_range(0..8) {
            0 => "count(*)".into(),
            1 => format!("count(DISTINCT {})", self.column_of(&[Int4, Text, Date])),
            2 => {
                let k = pick(
                    self.rng,
                    &[Int4, Int8, Float8, Numeric, Text, Timestamp, Date],
                );
                format!("{}({})", pick(self.rng, &["min", "max"]), self.column(k))
            }
            // Not sum(b): sum(bigint) is bigint in Sluice and fails on
            // overflow, where PostgreSQL's is numeric (DESIGN.md).
            3 => format!("sum({})", self.column_of(&[Int4, Numeric, Float8])),
            4 => format!("avg({})", self.column_of(&[Int4, Numeric])),
            5 => format!("bool_and({})", self.column(Bool)),
            6 => format!("string_agg({}, ',' ORDER BY s)", self.column(Text)),
            _ => format!("count({})", self.column_of(&[Int8, Float8, Timestamp])),
        }
    }
}

fn type_name(kind: Kind) -> &'static str {
    match kind {
        Int4 => "INT",
        Int8 => "BIGINT",
        Float8 => "DOUBLE PRECISION",
        Numeric => "NUMERIC",
        Text => "TEXT",
        Timestamp => "TIMESTAMP",
        Date => "DATE",
        Bool => "BOOLEAN",
        Interval => "INTERVAL",
    }
}
