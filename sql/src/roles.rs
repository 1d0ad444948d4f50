//! `CREATE ROLE`, `CREATE USER`, `ALTER ROLE`, `DROP ROLE`, read from
//! tokens: sqlparser reads `CREATE USER` the Snowflake way and would keep a
//! password in an AST a log line could print.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use crate::error::SqlError;
use crate::parse::Statement;

/// The attributes a role statement sets; `None` leaves one as it is (or
/// at its default for a new role).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleOptions {
    pub superuser: Option<bool>,
    pub login: Option<bool>,
    pub create_role: Option<bool>,
    /// `PASSWORD 'text'` (Some(Some)), `PASSWORD NULL` (Some(None)).
    pub password: Option<Option<String>>,
}

/// The tokens of `sql` without whitespace and trailing semicolons.
fn significant_tokens(sql: &str) -> Result<Vec<Token>, SqlError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let mut t: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    while matches!(t.last(), Some(Token::SemiColon)) {
        t.pop();
    }
    Ok(t)
}

/// The role statement `sql` is, if it is one.
pub(crate) fn parse_role_statement(sql: &str) -> Result<Option<Statement>, SqlError> {
    let t = significant_tokens(sql)?;
    let kw = |i: usize, k: &str| matches!(t.get(i), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    let is_role = |i: usize| kw(i, "role") || kw(i, "user");
    if kw(0, "create") && is_role(1) {
        let name = role_name(t.get(2))?;
        let mut options = options(&t[3..])?;
        // CREATE USER is CREATE ROLE with LOGIN unless it says otherwise.
        if kw(1, "user") && options.login.is_none() {
            options.login = Some(true);
        }
        return Ok(Some(Statement::CreateRole { name, options }));
    }
    if kw(0, "alter") && is_role(1) {
        let name = role_name(t.get(2))?;
        if kw(3, "rename") || kw(3, "set") || kw(3, "reset") || kw(3, "in") {
            return Err(SqlError::Unsupported(
                "ALTER ROLE takes role attributes (SUPERUSER, LOGIN, CREATEROLE, PASSWORD) only"
                    .into(),
            ));
        }
        let options = options(&t[3..])?;
        return Ok(Some(Statement::AlterRole { name, options }));
    }
    if kw(0, "drop") && is_role(1) {
        let (if_exists, start) = if kw(2, "if") && kw(3, "exists") {
            (true, 4)
        } else {
            (false, 2)
        };
        let mut names = vec![];
        let mut i = start;
        loop {
            names.push(role_name(t.get(i))?);
            match t.get(i + 1) {
                None => break,
                Some(Token::Comma) => i += 2,
                Some(other) => {
                    return Err(SqlError::Syntax(format!(
                        "expected a comma or the end of DROP ROLE, found {other}"
                    )))
                }
            }
        }
        return Ok(Some(Statement::DropRole { names, if_exists }));
    }
    Ok(None)
}

/// `sql` with the password of a role statement replaced by stars, for
/// logs and `sluice_catalog.sessions`; other statements unchanged.
pub fn redact_passwords(sql: &str) -> std::borrow::Cow<'_, str> {
    let head = sql
        .trim_start()
        .get(..12)
        .unwrap_or_default()
        .to_lowercase();
    if !(head.starts_with("create") || head.starts_with("alter")) {
        return sql.into();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.into();
    };
    if !tokens
        .iter()
        .any(|t| matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("password")))
    {
        return sql.into();
    }
    let mut out = String::with_capacity(sql.len());
    let mut after_password = false;
    for t in &tokens {
        match t {
            Token::SingleQuotedString(_) | Token::EscapedStringLiteral(_) if after_password => {
                out.push_str("'********'")
            }
            other => out.push_str(&other.to_string()),
        }
        if !matches!(t, Token::Whitespace(_)) {
            after_password =
                matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("password"));
        }
    }
    out.into()
}

fn role_name(token: Option<&Token>) -> Result<String, SqlError> {
    match token {
        Some(Token::Word(Word {
            value,
            quote_style: Some(_),
            ..
        })) => Ok(value.clone()),
        Some(Token::Word(w)) if !matches!(w.keyword, Keyword::WITH) => Ok(w.value.to_lowercase()),
        Some(other) => Err(SqlError::Syntax(format!(
            "expected a role name, found {other}"
        ))),
        None => Err(SqlError::Syntax("expected a role name".into())),
    }
}

fn options(tokens: &[Token]) -> Result<RoleOptions, SqlError> {
    let mut o = RoleOptions::default();
    let mut i = 0;
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_lowercase()),
        _ => None,
    };
    if word(0).as_deref() == Some("with") {
        i = 1;
    }
    while i < tokens.len() {
        let Some(w) = word(i) else {
            return Err(SqlError::Syntax(format!(
                "expected a role option, found {}",
                tokens[i]
            )));
        };
        let set = |slot: &mut Option<bool>, value: bool| -> Result<(), SqlError> {
            if slot.is_some() {
                return Err(SqlError::Syntax("conflicting or redundant options".into()));
            }
            *slot = Some(value);
            Ok(())
        };
        match w.as_str() {
            "superuser" => set(&mut o.superuser, true)?,
            "nosuperuser" => set(&mut o.superuser, false)?,
            "login" => set(&mut o.login, true)?,
            "nologin" => set(&mut o.login, false)?,
            "createrole" => set(&mut o.create_role, true)?,
            "nocreaterole" => set(&mut o.create_role, false)?,
            "encrypted" if word(i + 1).as_deref() == Some("password") => {
                i += 1;
                continue;
            }
            "password" => {
                if o.password.is_some() {
                    return Err(SqlError::Syntax("conflicting or redundant options".into()));
                }
                i += 1;
                o.password = Some(match tokens.get(i) {
                    Some(Token::Word(w)) if w.keyword == Keyword::NULL => None,
                    Some(Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s)) => {
                        if s.starts_with("SCRAM-SHA-256$") || s.starts_with("md5") && s.len() == 35 {
                            return Err(SqlError::Unsupported(
                                "a password given already hashed (as psql's \\password sends it) \
                                 cannot be stored: give it as text, \
                                 ALTER ROLE name PASSWORD 'text'"
                                    .into(),
                            ));
                        }
                        Some(s.clone())
                    }
                    _ => {
                        return Err(SqlError::Syntax(
                            "PASSWORD takes a string or NULL".into(),
                        ))
                    }
                });
            }
            other => {
                return Err(SqlError::Unsupported(format!(
                    "role option {} is not supported (SUPERUSER, LOGIN, CREATEROLE and PASSWORD are, with their NO forms)",
                    other.to_uppercase()
                )))
            }
        }
        i += 1;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> Statement {
        parse_role_statement(sql).unwrap().unwrap()
    }

    #[test]
    fn create_user_logs_in_and_create_role_does_not() {
        match parsed("CREATE USER alice WITH PASSWORD 'it''s'") {
            Statement::CreateRole { name, options } => {
                assert_eq!(name, "alice");
                assert_eq!(options.login, Some(true));
                assert_eq!(options.password, Some(Some("it's".into())));
            }
            other => panic!("{other:?}"),
        }
        match parsed("create role \"Ops\" nologin createrole;") {
            Statement::CreateRole { name, options } => {
                assert_eq!(name, "Ops");
                assert_eq!(options.login, Some(false));
                assert_eq!(options.create_role, Some(true));
                assert_eq!(options.password, None);
            }
            other => panic!("{other:?}"),
        }
        match parsed("CREATE USER bob NOLOGIN") {
            Statement::CreateRole { options, .. } => assert_eq!(options.login, Some(false)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn passwords_are_starred_out_of_logged_text() {
        assert_eq!(
            redact_passwords("CREATE USER a WITH PASSWORD 'hunter2' LOGIN"),
            "CREATE USER a WITH PASSWORD '********' LOGIN"
        );
        assert_eq!(
            redact_passwords("alter role a password E'x\\'y'"),
            "alter role a password '********'"
        );
        assert_eq!(redact_passwords("SELECT 'password'"), "SELECT 'password'");
    }

    #[test]
    fn alter_and_drop() {
        match parsed("ALTER ROLE alice WITH SUPERUSER PASSWORD NULL") {
            Statement::AlterRole { name, options } => {
                assert_eq!(name, "alice");
                assert_eq!(options.superuser, Some(true));
                assert_eq!(options.password, Some(None));
            }
            other => panic!("{other:?}"),
        }
        match parsed("DROP ROLE IF EXISTS a, \"B\"") {
            Statement::DropRole { names, if_exists } => {
                assert!(if_exists);
                assert_eq!(names, vec!["a".to_string(), "B".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_role_statement("SELECT 1").unwrap().is_none());
    }

    #[test]
    fn unknown_options_and_hashed_passwords_are_refused() {
        let e = parse_role_statement("CREATE ROLE a CREATEDB").unwrap_err();
        assert_eq!(e.sqlstate(), "0A000");
        assert!(e.to_string().contains("CREATEDB"), "{e}");
        let e = parse_role_statement("ALTER USER a PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'")
            .unwrap_err();
        assert_eq!(e.sqlstate(), "0A000");
        assert_eq!(
            parse_role_statement("CREATE ROLE a LOGIN LOGIN")
                .unwrap_err()
                .sqlstate(),
            "42601"
        );
        assert_eq!(
            parse_role_statement("CREATE ROLE").unwrap_err().sqlstate(),
            "42601"
        );
    }
}

/// A privilege `GRANT` and `REVOKE` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
    /// Reading a subscription with `DECLARE ... SUBSCRIPTION CURSOR`.
    Usage,
}

impl Privilege {
    pub fn name(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Usage => "USAGE",
        }
    }
}

/// What a `GRANT` or `REVOKE` is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantObjects {
    /// `ON [TABLE | VIEW | MATERIALIZED VIEW] a, b`: tables and views.
    Relations(Vec<String>),
    /// `ON ALL TABLES IN SCHEMA public`: every table and view there is now.
    AllInPublic,
    /// `ON SUBSCRIPTION s, ...`
    Subscriptions(Vec<String>),
}

/// `GRANT privileges ON objects TO roles` or `REVOKE ... FROM roles`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantStatement {
    pub grant: bool,
    /// `ALL [PRIVILEGES]` is every privilege the objects have.
    pub privileges: Vec<Privilege>,
    pub all: bool,
    pub objects: GrantObjects,
    /// Role names; `public` for PUBLIC.
    pub grantees: Vec<String>,
}

/// The grantee that stands for every role.
pub const PUBLIC: &str = "public";

pub(crate) fn parse_grant_statement(sql: &str) -> Result<Option<GrantStatement>, SqlError> {
    let t = significant_tokens(sql)?;
    let word = |i: usize| match t.get(i) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_lowercase()),
        _ => None,
    };
    let grant = match word(0).as_deref() {
        Some("grant") => true,
        Some("revoke") => false,
        _ => return Ok(None),
    };
    let mut i = 1;
    if !grant && word(1).as_deref() == Some("grant") {
        return Err(SqlError::Unsupported(
            "REVOKE GRANT OPTION FOR is not supported: there is no grant option".into(),
        ));
    }
    let mut privileges = vec![];
    let mut all = false;
    loop {
        match word(i).as_deref() {
            Some("all") => {
                all = true;
                if word(i + 1).as_deref() == Some("privileges") {
                    i += 1;
                }
            }
            Some("select") => privileges.push(Privilege::Select),
            Some("insert") => privileges.push(Privilege::Insert),
            Some("update") => privileges.push(Privilege::Update),
            Some("delete") => privileges.push(Privilege::Delete),
            Some("usage") => privileges.push(Privilege::Usage),
            Some(other) => {
                return Err(SqlError::Unsupported(format!(
                "privilege {} is not supported (SELECT, INSERT, UPDATE, DELETE, USAGE and ALL are)",
                other.to_uppercase()
            )))
            }
            None => return Err(SqlError::Syntax("expected a privilege".into())),
        }
        i += 1;
        match t.get(i) {
            Some(Token::Comma) => i += 1,
            Some(Token::LParen) => {
                return Err(SqlError::Unsupported(
                    "column privileges are not supported: grant on the whole table".into(),
                ))
            }
            _ => break,
        }
    }
    if word(i).as_deref() != Some("on") {
        return Err(SqlError::Syntax("expected ON after the privileges".into()));
    }
    i += 1;
    let names = |i: &mut usize| -> Result<Vec<String>, SqlError> {
        let mut out = vec![];
        loop {
            out.push(role_name(t.get(*i))?);
            *i += 1;
            if matches!(t.get(*i), Some(Token::Comma)) {
                *i += 1;
            } else {
                return Ok(out);
            }
        }
    };
    let objects = match (word(i).as_deref(), word(i + 1).as_deref()) {
        (Some("all"), Some("tables")) => {
            if word(i + 2).as_deref() != Some("in")
                || word(i + 3).as_deref() != Some("schema")
                || word(i + 4).as_deref() != Some("public")
            {
                return Err(SqlError::Unsupported(
                    "ALL TABLES takes IN SCHEMA public, the one schema of tables here".into(),
                ));
            }
            i += 5;
            GrantObjects::AllInPublic
        }
        (Some("materialized"), Some("view")) => {
            i += 2;
            GrantObjects::Relations(names(&mut i)?)
        }
        (Some("table" | "view"), _) => {
            i += 1;
            GrantObjects::Relations(names(&mut i)?)
        }
        (Some("subscription"), _) => {
            i += 1;
            GrantObjects::Subscriptions(names(&mut i)?)
        }
        (Some("schema" | "database" | "function" | "sequence"), _) => {
            return Err(SqlError::Unsupported(format!(
                "GRANT ON {} is not supported: grant on tables, views and subscriptions",
                word(i).unwrap_or_default().to_uppercase()
            )))
        }
        _ => GrantObjects::Relations(names(&mut i)?),
    };
    let to = if grant { "to" } else { "from" };
    if word(i).as_deref() != Some(to) {
        return Err(SqlError::Syntax(format!(
            "expected {} after the objects",
            to.to_uppercase()
        )));
    }
    i += 1;
    let grantees = names(&mut i)?;
    if i < t.len() {
        return Err(SqlError::Unsupported(format!(
            "{} ... {} is not supported (there is no grant option)",
            if grant { "GRANT" } else { "REVOKE" },
            t[i..]
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        )));
    }
    let on_subscriptions = matches!(objects, GrantObjects::Subscriptions(_));
    for p in &privileges {
        if (*p == Privilege::Usage) != on_subscriptions {
            return Err(SqlError::InvalidGrant(format!(
                "invalid privilege type {} for {}",
                p.name(),
                if on_subscriptions {
                    "subscription"
                } else {
                    "relation"
                }
            )));
        }
    }
    Ok(Some(GrantStatement {
        grant,
        privileges,
        all,
        objects,
        grantees,
    }))
}

#[cfg(test)]
mod grant_tests {
    use super::*;

    fn parsed(sql: &str) -> GrantStatement {
        parse_grant_statement(sql).unwrap().unwrap()
    }

    #[test]
    fn grants_and_revokes() {
        let g = parsed("GRANT SELECT, INSERT ON TABLE t, \"V\" TO alice, PUBLIC");
        assert!(g.grant);
        assert_eq!(g.privileges, vec![Privilege::Select, Privilege::Insert]);
        assert_eq!(
            g.objects,
            GrantObjects::Relations(vec!["t".into(), "V".into()])
        );
        assert_eq!(g.grantees, vec!["alice".to_string(), "public".to_string()]);
        let g = parsed("revoke all privileges on materialized view v from bob;");
        assert!(!g.grant && g.all);
        assert_eq!(g.objects, GrantObjects::Relations(vec!["v".into()]));
        let g = parsed("GRANT SELECT ON ALL TABLES IN SCHEMA public TO r");
        assert_eq!(g.objects, GrantObjects::AllInPublic);
        let g = parsed("GRANT USAGE ON SUBSCRIPTION s TO r");
        assert_eq!(g.objects, GrantObjects::Subscriptions(vec!["s".into()]));
        let g = parsed("GRANT ALL ON t TO r");
        assert!(g.all && g.privileges.is_empty());
        assert!(parse_grant_statement("SELECT 1").unwrap().is_none());
    }

    #[test]
    fn what_is_not_supported_says_so() {
        for (sql, code) in [
            ("GRANT SELECT ON t TO r WITH GRANT OPTION", "0A000"),
            ("GRANT SELECT (a) ON t TO r", "0A000"),
            ("GRANT CREATE ON SCHEMA public TO r", "0A000"),
            ("GRANT USAGE ON TABLE t TO r", "0LP01"),
            ("GRANT SELECT ON SUBSCRIPTION s TO r", "0LP01"),
            ("GRANT SELECT t TO r", "42601"),
        ] {
            let e = parse_grant_statement(sql).unwrap_err();
            assert_eq!(e.sqlstate(), code, "{sql}: {e}");
        }
    }
}
