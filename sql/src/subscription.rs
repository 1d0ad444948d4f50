//! Statements of subscriptions (consumer groups), their cursors, sinks
//! (a consumer group that writes to Kafka), view rebuilds and cuts (named
//! positions in the log). None of them is PostgreSQL syntax that `sqlparser` knows, so
//! they are read here from the token stream.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use sluice_catalog::KafkaSink;

use crate::error::SqlError;
use crate::parse::Statement;

/// A position in a source: where a group starts, a cursor begins, or a
/// rebuild replays from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    Earliest,
    Latest,
    /// The first records ingested at or after this time (the literal as
    /// written; the server reads it as a timestamp).
    Timestamp(String),
    /// Explicit next offsets per partition.
    Offsets(Vec<(u32, u64)>),
}

/// `CREATE SUBSCRIPTION s FROM t [WITH (start = 'earliest' | 'latest')]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSubscription {
    pub name: String,
    pub source: String,
    pub start: StartAt,
}

/// `CREATE SINK [IF NOT EXISTS] s FROM relation INTO kafka WITH (topic =
/// '...', bootstrap_servers = '...', format = 'json', key = 'a, b',
/// start = 'earliest' | 'latest', "kafka.<property>" = '...')`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSink {
    pub name: String,
    pub source: String,
    pub if_not_exists: bool,
    /// Where in the source the sink starts: its first retained row, or
    /// what comes after the CREATE.
    pub start: StartAt,
    /// The sink's settings; the server chooses its transactional id.
    pub sink: KafkaSink,
}

/// How many rows `FETCH` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchCount {
    Rows(u64),
    All,
}

/// `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] c [WITH (timeout = '5s')]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub cursor: String,
    pub count: FetchCount,
    /// How long to wait for a first row when none is there; none: answer
    /// at once.
    pub timeout_us: Option<i64>,
}

/// Reads the statements of this module; `None` when the text is something
/// else.
pub(crate) fn parse_subscription_statement(sql: &str) -> Result<Option<Statement>, SqlError> {
    let tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF | Token::SemiColon))
        .collect();
    let mut p = Tokens { tokens, at: 0 };
    let statement = if p.keywords(&["create", "subscription"]) {
        create_subscription(&mut p)?
    } else if p.keywords(&["create", "sink"]) {
        create_sink(&mut p)?
    } else if p.keywords(&["drop", "sink"]) {
        let if_exists = p.keywords(&["if", "exists"]);
        let mut names = vec![p.ident("sink name")?];
        while p.punct(&Token::Comma) {
            names.push(p.ident("sink name")?);
        }
        Statement::DropSink { names, if_exists }
    } else if p.keywords(&["drop", "subscription"]) {
        let if_exists = p.keywords(&["if", "exists"]);
        let mut names = vec![p.ident("subscription name")?];
        while p.punct(&Token::Comma) {
            names.push(p.ident("subscription name")?);
        }
        Statement::DropSubscription { names, if_exists }
    } else if p.keywords(&["alter", "subscription"]) {
        let name = p.ident("subscription name")?;
        p.expect(&["reset", "to"])?;
        let to = start_at(&mut p, true)?;
        Statement::ResetSubscription { name, to }
    } else if p.keyword("declare") {
        let name = p.ident("cursor name")?;
        if !p.keywords(&["subscription", "cursor", "for"]) {
            return Err(SqlError::Unsupported(
                "only subscription cursors are supported: DECLARE c SUBSCRIPTION CURSOR FOR s"
                    .into(),
            ));
        }
        let subscription = p.ident("subscription name")?;
        let since = if p.keyword("since") {
            Some(start_at(&mut p, true)?)
        } else {
            None
        };
        Statement::DeclareCursor {
            name,
            subscription,
            since,
        }
    } else if p.keyword("fetch") {
        Statement::Fetch(fetch(&mut p)?)
    } else if p.keyword("close") {
        let name = if p.keyword("all") {
            None
        } else {
            Some(p.ident("cursor name")?)
        };
        Statement::CloseCursor { name }
    } else if p.keywords(&["create", "cut"]) {
        let name = p.ident("cut name")?;
        let tables = if p.keyword("for") {
            if p.keywords(&["all", "tables"]) {
                None
            } else {
                let mut tables = vec![p.ident("table name")?];
                while p.punct(&Token::Comma) {
                    tables.push(p.ident("table name")?);
                }
                Some(tables)
            }
        } else {
            None
        };
        Statement::CreateCut { name, tables }
    } else if p.keywords(&["drop", "cut"]) {
        let if_exists = p.keywords(&["if", "exists"]);
        let mut names = vec![p.ident("cut name")?];
        while p.punct(&Token::Comma) {
            names.push(p.ident("cut name")?);
        }
        Statement::DropCut { names, if_exists }
    } else if p.keywords(&["alter", "materialized", "view"]) {
        let name = p.ident("view name")?;
        p.expect(&["rebuild"])?;
        let from = if p.keyword("from") {
            match start_at(&mut p, false)? {
                StartAt::Latest => {
                    return Err(SqlError::Syntax(
                        "REBUILD FROM takes EARLIEST or TIMESTAMP '...'".into(),
                    ))
                }
                other => other,
            }
        } else {
            StartAt::Earliest
        };
        Statement::RebuildView { name, from }
    } else {
        return Ok(None);
    };
    if let Some(t) = p.peek() {
        return Err(SqlError::Syntax(format!("syntax error at or near \"{t}\"")));
    }
    Ok(Some(statement))
}

fn create_subscription(p: &mut Tokens) -> Result<Statement, SqlError> {
    let name = p.ident("subscription name")?;
    if !(p.keyword("from") || p.keyword("for")) {
        return Err(p.unexpected("FROM"));
    }
    let source = p.ident("table or view name")?;
    let mut start = StartAt::Earliest;
    if p.keyword("with") {
        p.require_punct(&Token::LParen, "(")?;
        loop {
            let key = p.ident("option name")?;
            p.require_punct(&Token::Eq, "=")?;
            let value = p.string_or_word("option value")?;
            match (key.as_str(), value.to_lowercase().as_str()) {
                ("start", "earliest") => start = StartAt::Earliest,
                ("start", "latest") => start = StartAt::Latest,
                ("start", other) => {
                    return Err(SqlError::InvalidOption(format!(
                        "invalid value for option \"start\": \"{other}\" (earliest or latest)"
                    )))
                }
                (other, _) => {
                    return Err(SqlError::InvalidOption(format!(
                        "unrecognized subscription option \"{other}\" (known: start)"
                    )))
                }
            }
            if !p.punct(&Token::Comma) {
                break;
            }
        }
        p.require_punct(&Token::RParen, ")")?;
    }
    Ok(Statement::CreateSubscription(CreateSubscription {
        name,
        source,
        start,
    }))
}

fn create_sink(p: &mut Tokens) -> Result<Statement, SqlError> {
    let if_not_exists = p.keywords(&["if", "not", "exists"]);
    let name = p.ident("sink name")?;
    p.expect(&["from"])?;
    let source = p.ident("table or view name")?;
    p.expect(&["into"])?;
    let connector = p.ident("connector name")?;
    if connector != "kafka" {
        return Err(SqlError::InvalidOption(format!(
            "sink connector \"{connector}\" is not supported (only kafka)"
        )));
    }
    let (mut topic, mut servers, mut key, mut start) = (None, None, Vec::new(), StartAt::Earliest);
    let mut properties = Vec::new();
    if p.keyword("with") {
        p.require_punct(&Token::LParen, "(")?;
        loop {
            let option = p.option_name()?;
            p.require_punct(&Token::Eq, "=")?;
            let value = p.option_value()?;
            match option.as_str() {
                "topic" => topic = Some(value),
                "bootstrap_servers" => servers = Some(value),
                "format" if value.eq_ignore_ascii_case("json") => {}
                "format" => {
                    return Err(SqlError::InvalidOption(format!(
                        "invalid value for option \"format\": \"{value}\" (a sink writes json)"
                    )))
                }
                "key" => {
                    key = value
                        .split(',')
                        .map(|c| c.trim().to_lowercase())
                        .filter(|c| !c.is_empty())
                        .collect();
                    if key.is_empty() {
                        return Err(SqlError::InvalidOption(
                            "option \"key\" names no column".into(),
                        ));
                    }
                }
                "start" => {
                    start = match value.to_lowercase().as_str() {
                        "earliest" => StartAt::Earliest,
                        "latest" => StartAt::Latest,
                        other => {
                            return Err(SqlError::InvalidOption(format!(
                                "invalid value for option \"start\": \"{other}\" (earliest or latest)"
                            )))
                        }
                    }
                }
                other => match other.strip_prefix("kafka.") {
                    Some(property) if !property.is_empty() => {
                        properties.push((property.to_string(), value))
                    }
                    _ => {
                        return Err(SqlError::InvalidOption(format!(
                            "unrecognized sink option \"{other}\" (known: topic, bootstrap_servers, format, key, start, kafka.<property>)"
                        )))
                    }
                },
            }
            if !p.punct(&Token::Comma) {
                break;
            }
        }
        p.require_punct(&Token::RParen, ")")?;
    }
    let needs =
        |name: &str| SqlError::InvalidOption(format!("a Kafka sink needs the option {name}"));
    Ok(Statement::CreateSink(Box::new(CreateSink {
        name,
        source,
        if_not_exists,
        start,
        sink: KafkaSink {
            topic: topic.ok_or_else(|| needs("topic"))?,
            bootstrap_servers: servers.ok_or_else(|| needs("bootstrap_servers"))?,
            key,
            properties,
            transactional_id: String::new(),
        },
    })))
}

fn start_at(p: &mut Tokens, offsets_allowed: bool) -> Result<StartAt, SqlError> {
    if p.keyword("earliest") {
        Ok(StartAt::Earliest)
    } else if p.keyword("latest") {
        Ok(StartAt::Latest)
    } else if p.keyword("timestamp") {
        Ok(StartAt::Timestamp(p.string("a timestamp literal")?))
    } else if offsets_allowed && p.keyword("offsets") {
        p.require_punct(&Token::LParen, "(")?;
        let mut offsets = Vec::new();
        loop {
            let partition = p.number("a partition number")?;
            // `=>` (or `=`) between a partition and its offset.
            if !(p.punct(&Token::RArrow) || p.punct(&Token::Eq)) {
                return Err(p.unexpected("=>"));
            }
            let offset = p.number("an offset")?;
            let partition = u32::try_from(partition)
                .map_err(|_| SqlError::InvalidOption(format!("no partition {partition}")))?;
            offsets.push((partition, offset));
            if !p.punct(&Token::Comma) {
                break;
            }
        }
        p.require_punct(&Token::RParen, ")")?;
        Ok(StartAt::Offsets(offsets))
    } else {
        Err(p.unexpected(if offsets_allowed {
            "EARLIEST, LATEST, TIMESTAMP or OFFSETS"
        } else {
            "EARLIEST, LATEST or TIMESTAMP"
        }))
    }
}

fn fetch(p: &mut Tokens) -> Result<Fetch, SqlError> {
    p.keyword("forward");
    let count = if p.keyword("all") {
        FetchCount::All
    } else if p.keyword("next") {
        FetchCount::Rows(1)
    } else if matches!(p.peek(), Some(Token::Number(..))) {
        FetchCount::Rows(p.number("a row count")?)
    } else {
        FetchCount::Rows(1)
    };
    if !p.keyword("from") {
        p.keyword("in");
    }
    let cursor = p.ident("cursor name")?;
    let mut timeout_us = None;
    if p.keyword("with") {
        p.require_punct(&Token::LParen, "(")?;
        let key = p.ident("option name")?;
        p.require_punct(&Token::Eq, "=")?;
        let value = p.string_or_word("option value")?;
        if key != "timeout" {
            return Err(SqlError::InvalidOption(format!(
                "unrecognized FETCH option \"{key}\" (known: timeout)"
            )));
        }
        timeout_us = Some(crate::ddl::parse_duration_us(&value)?);
        p.require_punct(&Token::RParen, ")")?;
    }
    Ok(Fetch {
        cursor,
        count,
        timeout_us,
    })
}

struct Tokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokens {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn keyword(&mut self, kw: &str) -> bool {
        let hit = matches!(self.peek(), Some(Token::Word(Word { value, quote_style: None, .. })) if value.eq_ignore_ascii_case(kw));
        if hit {
            self.at += 1;
        }
        hit
    }

    /// Consumes the keywords only when all of them follow.
    fn keywords(&mut self, kws: &[&str]) -> bool {
        let at = self.at;
        if kws.iter().all(|k| self.keyword(k)) {
            return true;
        }
        self.at = at;
        false
    }

    fn expect(&mut self, kws: &[&str]) -> Result<(), SqlError> {
        for k in kws {
            if !self.keyword(k) {
                return Err(self.unexpected(&k.to_uppercase()));
            }
        }
        Ok(())
    }

    fn punct(&mut self, t: &Token) -> bool {
        let hit = self.peek() == Some(t);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn require_punct(&mut self, t: &Token, shown: &str) -> Result<(), SqlError> {
        if self.punct(t) {
            Ok(())
        } else {
            Err(self.unexpected(shown))
        }
    }

    fn unexpected(&self, wanted: &str) -> SqlError {
        match self.peek() {
            Some(t) => SqlError::Syntax(format!("expected {wanted}, found \"{t}\"")),
            None => SqlError::Syntax(format!("expected {wanted} at end of statement")),
        }
    }

    /// An identifier; unquoted ones fold to lower case.
    fn ident(&mut self, what: &str) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Word(w)) => {
                let name = if w.quote_style.is_some() {
                    w.value.clone()
                } else {
                    w.value.to_lowercase()
                };
                self.at += 1;
                // `public.t`: the schema is accepted and dropped.
                if self.punct(&Token::Period) {
                    return self.ident(what);
                }
                Ok(name)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::SingleQuotedString(s)) => {
                let s = s.clone();
                self.at += 1;
                Ok(s)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn string_or_word(&mut self, what: &str) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Word(w)) => {
                let v = w.value.clone();
                self.at += 1;
                Ok(v)
            }
            _ => self.string(what),
        }
    }

    /// An option's name: a word, a quoted name, or dotted words
    /// (`kafka.linger.ms`), which stay whole.
    fn option_name(&mut self) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Word(w)) if w.quote_style.is_some() => {
                let name = w.value.clone();
                self.at += 1;
                Ok(name)
            }
            Some(Token::Word(_)) => {
                let mut name = self.word_lower()?;
                while self.punct(&Token::Period) {
                    name.push('.');
                    name.push_str(&self.word_lower()?);
                }
                Ok(name)
            }
            Some(Token::SingleQuotedString(_)) => self.string("option name"),
            _ => Err(self.unexpected("option name")),
        }
    }

    fn word_lower(&mut self) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Word(w)) => {
                let v = w.value.to_lowercase();
                self.at += 1;
                Ok(v)
            }
            _ => Err(self.unexpected("option name")),
        }
    }

    /// An option's value: a string, a word or a number, as written.
    fn option_value(&mut self) -> Result<String, SqlError> {
        match self.peek() {
            Some(Token::Number(n, _)) => {
                let v = n.clone();
                self.at += 1;
                Ok(v)
            }
            _ => self.string_or_word("option value"),
        }
    }

    fn number(&mut self, what: &str) -> Result<u64, SqlError> {
        match self.peek() {
            Some(Token::Number(n, _)) => {
                let v = n
                    .parse::<u64>()
                    .map_err(|_| SqlError::Syntax(format!("invalid {what}: {n}")))?;
                self.at += 1;
                Ok(v)
            }
            _ => Err(self.unexpected(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_sql;

    #[test]
    fn cut_statements() {
        match parse_sql("CREATE CUT c1 FOR requests, public.labels").unwrap() {
            Statement::CreateCut { name, tables } => {
                assert_eq!(name, "c1");
                assert_eq!(tables, Some(vec!["requests".into(), "labels".into()]));
            }
            other => panic!("{other:?}"),
        }
        for sql in ["CREATE CUT c1", "create cut c1 for all tables;"] {
            assert!(matches!(
                parse_sql(sql).unwrap(),
                Statement::CreateCut { tables: None, .. }
            ));
        }
        match parse_sql("DROP CUT IF EXISTS c1, c2").unwrap() {
            Statement::DropCut { names, if_exists } => {
                assert_eq!(names, ["c1", "c2"]);
                assert!(if_exists);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_sql("CREATE CUT c1 FOR").is_err());
    }

    #[test]
    fn subscription_statements() {
        match parse_sql("CREATE SUBSCRIPTION billing FROM usage WITH (start = 'latest')").unwrap() {
            Statement::CreateSubscription(c) => {
                assert_eq!(c.name, "billing");
                assert_eq!(c.source, "usage");
                assert_eq!(c.start, StartAt::Latest);
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("ALTER SUBSCRIPTION s RESET TO OFFSETS (0 => 8800, 1 => 9040)").unwrap() {
            Statement::ResetSubscription { name, to } => {
                assert_eq!(name, "s");
                assert_eq!(to, StartAt::Offsets(vec![(0, 8800), (1, 9040)]));
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("DECLARE c SUBSCRIPTION CURSOR FOR s SINCE TIMESTAMP '2026-01-01 00:00:00'")
            .unwrap()
        {
            Statement::DeclareCursor { name, since, .. } => {
                assert_eq!(name, "c");
                assert_eq!(
                    since,
                    Some(StartAt::Timestamp("2026-01-01 00:00:00".into()))
                );
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("FETCH 100 FROM c WITH (timeout = '5s')").unwrap() {
            Statement::Fetch(f) => {
                assert_eq!(f.count, FetchCount::Rows(100));
                assert_eq!(f.timeout_us, Some(5_000_000));
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("FETCH ALL IN c").unwrap() {
            Statement::Fetch(f) => assert_eq!(f.count, FetchCount::All),
            other => panic!("{other:?}"),
        }
        match parse_sql("ALTER MATERIALIZED VIEW v REBUILD FROM TIMESTAMP '2026-01-01'").unwrap() {
            Statement::RebuildView { name, from } => {
                assert_eq!(name, "v");
                assert_eq!(from, StartAt::Timestamp("2026-01-01".into()));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_sql("DECLARE c CURSOR FOR SELECT 1"),
            Err(SqlError::Unsupported(_))
        ));
        assert!(matches!(
            parse_sql("CREATE SUBSCRIPTION s FROM t WITH (start = 'soon')"),
            Err(SqlError::InvalidOption(_))
        ));
        match parse_sql(
            "CREATE SINK IF NOT EXISTS s FROM totals INTO kafka WITH (topic = 'out', \
             bootstrap_servers = '127.0.0.1:9092', format = 'json', key = 'tenant, Day', \
             kafka.linger.ms = 5, \"kafka.compression.type\" = 'lz4', start = latest)",
        )
        .unwrap()
        {
            Statement::CreateSink(c) => {
                assert_eq!((c.name.as_str(), c.source.as_str()), ("s", "totals"));
                assert!(c.if_not_exists);
                assert_eq!(c.start, StartAt::Latest);
                assert_eq!(c.sink.topic, "out");
                assert_eq!(c.sink.key, ["tenant", "day"]);
                assert_eq!(
                    c.sink.properties,
                    [
                        ("linger.ms".to_string(), "5".to_string()),
                        ("compression.type".to_string(), "lz4".to_string())
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        match parse_sql("DROP SINK IF EXISTS a, b").unwrap() {
            Statement::DropSink { names, if_exists } => {
                assert_eq!(names, ["a", "b"]);
                assert!(if_exists);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "CREATE SINK s FROM t INTO kafka WITH (topic = 'x')",
            "CREATE SINK s FROM t INTO kafka WITH (bootstrap_servers = 'b:1')",
            "CREATE SINK s FROM t INTO kafka WITH (topic = 'x', bootstrap_servers = 'b:1', format = 'avro')",
            "CREATE SINK s FROM t INTO kafka WITH (topic = 'x', bootstrap_servers = 'b:1', colour = 'red')",
            "CREATE SINK s FROM t INTO kafka WITH (topic = 'x', bootstrap_servers = 'b:1', key = ' , ')",
            "CREATE SINK s FROM t INTO s3 WITH (topic = 'x', bootstrap_servers = 'b:1')",
        ] {
            assert!(
                matches!(parse_sql(bad), Err(SqlError::InvalidOption(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_sql("FETCH 10 FROM c extra"),
            Err(SqlError::Syntax(_))
        ));
    }
}
