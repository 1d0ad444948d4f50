//! Relations as tools make and name them (see `sluice_sql::relations`):
//! `CREATE VIEW` and `DROP VIEW` (views that are named queries),
//! `CREATE TABLE ... AS query`, `ALTER ... RENAME TO`, `REFRESH
//! MATERIALIZED VIEW`, and `CREATE INDEX`/`DROP INDEX`.

use sluice_catalog::{IndexDef, QueryViewDef};
use sluice_sql::{CreateIndex, CreateQueryView, CreateTableAs, RelationKind};

use super::*;

/// What a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    Table,
    MaterializedView,
    View,
}

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn relation_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::RefreshView { name, with_data } => {
                match self.found(&name) {
                    Some(Found::MaterializedView) => {}
                    // PostgreSQL's SQLSTATE here is 0A000, not 42809.
                    Some(_) => {
                        return Err(SluiceError::Unsupported(format!(
                            "\"{name}\" is not a materialized view"
                        )))
                    }
                    None => return Err(SluiceError::UndefinedTable(name)),
                }
                if !with_data {
                    return Err(SluiceError::Unsupported(
                        "REFRESH MATERIALIZED VIEW ... WITH NO DATA: a materialized view is \
                         always populated"
                            .into(),
                    ));
                }
                self.roles
                    .check_owner(&session.role(), ObjectKind::View, &name)?;
                self.views.flush_view(&name).await?;
                Ok(Outcome::done("REFRESH MATERIALIZED VIEW"))
            }
            Statement::CreateQueryView(view) => self.create_query_view(session, view).await,
            Statement::DropQueryView {
                names,
                if_exists,
                cascade,
            } => self.drop_query_views(session, names, if_exists, cascade),
            Statement::CreateTableAs(create) => self.create_table_as(session, *create).await,
            Statement::RenameRelation {
                kind,
                name,
                to,
                if_exists,
            } => self.rename(session, kind, &name, &to, if_exists),
            Statement::CreateIndex(create) => self.create_index(session, create).await,
            Statement::DropIndex { names, if_exists } => {
                self.drop_indexes(session, names, if_exists)
            }
            other => Err(misrouted("relations", &other)),
        }
    }

    pub(super) fn found(&self, name: &str) -> Option<Found> {
        if self.store.table(name).is_some() {
            Some(Found::Table)
        } else if self.views.view(name).is_some() {
            Some(Found::MaterializedView)
        } else if self.store.query_view(name).is_some() {
            Some(Found::View)
        } else {
            None
        }
    }

    async fn create_query_view(
        &self,
        session: &Session,
        view: CreateQueryView,
    ) -> Result<Outcome, SluiceError> {
        let role = session.role();
        let old = self.store.query_view(&view.name);
        match (self.found(&view.name), &old) {
            (Some(Found::View), Some(old)) if view.or_replace => {
                self.roles
                    .check_owner(&role, ObjectKind::Table, &old.name)?;
            }
            (Some(_), _) => {
                return Err(sluice_catalog::CatalogError::DuplicateTable(view.name).into())
            }
            (None, _) => {}
        }
        // Planned now, as it will be when read: what it names must exist
        // and the reader must be able to read it.
        let (_, shown) = self
            .planner
            .plan_shown(ast::Statement::Query(view.query.clone()), &role)
            .await?;
        let mut columns: Vec<String> = shown.fields().iter().map(|f| f.name().clone()).collect();
        if view.columns.len() > columns.len() {
            return Err(sluice_sql::SqlError::Syntax(
                "CREATE VIEW specifies more column names than columns".into(),
            )
            .into());
        }
        for (i, name) in view.columns.iter().enumerate() {
            columns[i] = name.clone();
        }
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].contains(c) {
                return Err(sluice_sql::SqlError::DuplicateColumn(c.clone()).into());
            }
        }
        if let Some(old) = &old {
            // As in PostgreSQL, a replacing view keeps the columns it had,
            // in their places, and may add more after them.
            if columns.len() < old.columns.len() {
                return Err(SluiceError::InvalidDefinition(
                    "cannot drop columns from view".into(),
                ));
            }
            for (was, now) in old.columns.iter().zip(&columns) {
                if was != now {
                    return Err(SluiceError::InvalidDefinition(format!(
                        "cannot change name of view column \"{was}\" to \"{now}\""
                    )));
                }
            }
        }
        let reads: Vec<String> = self
            .relations_named(&view.query)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        if reads_through(&self.store.query_views(), &reads, &view.name) {
            return Err(SluiceError::InvalidRecursion(view.name));
        }
        let def = QueryViewDef {
            id: 0,
            name: view.name.clone(),
            query: view.query.to_string(),
            columns,
            reads,
        };
        self.store.create_query_view(def, view.or_replace)?;
        if old.is_none() {
            self.roles
                .created(&role, ObjectKind::Table, std::slice::from_ref(&view.name))?;
        }
        Ok(Outcome::done("CREATE VIEW"))
    }

    fn drop_query_views(
        &self,
        session: &Session,
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    ) -> Result<Outcome, SluiceError> {
        let role = session.role();
        for name in &names {
            match self.found(name) {
                Some(Found::View) => {
                    self.roles.check_owner(&role, ObjectKind::Table, name)?;
                }
                Some(_) => return Err(SluiceError::WrongObjectType(name.clone(), "view")),
                None if if_exists => {}
                None => return Err(SluiceError::UndefinedView(name.clone())),
            }
        }
        // Each named view, and with CASCADE the views that read them.
        let mut dropping: Vec<String> = names
            .iter()
            .filter(|n| self.found(n) == Some(Found::View))
            .cloned()
            .collect();
        let mut i = 0;
        while i < dropping.len() {
            for dependent in self.query_view_dependents(&dropping[i]) {
                if dropping.contains(&dependent) {
                    continue;
                }
                if !cascade {
                    return Err(SluiceError::DependentObjects {
                        kind: "view",
                        name: dropping[i].clone(),
                        dependent: format!("view {dependent}"),
                    });
                }
                dropping.push(dependent);
            }
            i += 1;
        }
        for name in &dropping {
            self.store.drop_query_view(name)?;
            self.roles
                .dropped(ObjectKind::Table, std::slice::from_ref(name))?;
        }
        Ok(Outcome::done("DROP VIEW"))
    }

    /// The views (named queries) that name `name`.
    pub(super) fn query_view_dependents(&self, name: &str) -> Vec<String> {
        self.store
            .query_views()
            .into_iter()
            .filter(|v| v.reads.iter().any(|r| r == name))
            .map(|v| v.name)
            .collect()
    }

    /// Whether an index (a user's, or a keyed table's `<table>_pkey`) or a
    /// relation has this name: they share one namespace.
    fn index_name_taken(&self, name: &str) -> bool {
        self.store.index_def(name).is_some()
            || self.found(name).is_some()
            || self
                .store
                .tables()
                .iter()
                .any(|t| t.def().has_primary_key() && format!("{}_pkey", t.name()) == name)
    }

    async fn create_index(
        &self,
        session: &Session,
        create: CreateIndex,
    ) -> Result<Outcome, SluiceError> {
        let table = &create.table;
        let (on, columns, kind) = match self.found(table) {
            Some(Found::Table) => {
                let Some(t) = self.store.table(table) else {
                    return Err(SluiceError::UndefinedTable(table.clone()));
                };
                let def = t.def();
                let columns: Vec<(String, arrow::datatypes::DataType)> = def
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), c.ty.to_arrow()))
                    .collect();
                (def.id, columns, ObjectKind::Table)
            }
            Some(Found::MaterializedView) => {
                let Some(v) = self.views.view(table) else {
                    return Err(SluiceError::UndefinedTable(table.clone()));
                };
                let columns = v
                    .schema
                    .fields()
                    .iter()
                    .map(|f| (f.name().clone(), f.data_type().clone()))
                    .collect();
                (v.def.id, columns, ObjectKind::View)
            }
            Some(Found::View) => {
                return Err(SluiceError::WrongObjectType(
                    table.clone(),
                    "table or materialized view",
                ))
            }
            None => return Err(SluiceError::UndefinedTable(table.clone())),
        };
        self.roles.check_owner(&session.role(), kind, table)?;
        for c in &create.columns {
            let Some((_, ty)) = columns.iter().find(|(n, _)| n == c) else {
                return Err(SluiceError::UndefinedColumn(c.clone()));
            };
            if !crate::query::index_bounds::indexable(ty) {
                return Err(SluiceError::Unsupported(format!(
                    "column \"{c}\" cannot be indexed: indexes take integer, numeric, text, \
                     boolean, bytea, date, time and timestamp columns"
                )));
            }
        }
        let name = match create.name {
            Some(name) => {
                if self.index_name_taken(&name) {
                    if create.if_not_exists {
                        return Ok(Outcome::done("CREATE INDEX"));
                    }
                    return Err(sluice_catalog::CatalogError::DuplicateTable(name).into());
                }
                name
            }
            // PostgreSQL's choice: `<table>_<columns>_idx`, then with a number.
            None => {
                let base = format!("{table}_{}_idx", create.columns.join("_"));
                let mut name = base.clone();
                let mut n = 0;
                while self.index_name_taken(&name) {
                    n += 1;
                    name = format!("{base}{n}");
                }
                name
            }
        };
        let (def, attached) = self.store.create_index_def(IndexDef {
            id: 0,
            name,
            on,
            columns: create.columns,
            options: create.options,
        })?;
        // A table's index is built now, from every committed record.
        if let Some((t, index)) = attached {
            let ends = t.commits().borrow().clone();
            if let Err(e) = index.build(&t, &ends).await {
                let _ = self.store.drop_index_def(&def.name);
                return Err(e.into());
            }
        }
        Ok(Outcome::done("CREATE INDEX"))
    }

    fn drop_indexes(
        &self,
        session: &Session,
        names: Vec<String>,
        if_exists: bool,
    ) -> Result<Outcome, SluiceError> {
        // Every name is checked before any index is dropped.
        let mut dropping = Vec::new();
        for name in names {
            let Some(def) = self.store.index_def(&name) else {
                if let Some(t) = self
                    .store
                    .tables()
                    .into_iter()
                    .find(|t| t.def().has_primary_key() && format!("{}_pkey", t.name()) == name)
                {
                    return Err(SluiceError::DependentObjects {
                        kind: "index",
                        name: name.clone(),
                        dependent: format!("constraint {name} on table {}", t.name()),
                    });
                }
                if if_exists {
                    continue;
                }
                return Err(SluiceError::UndefinedIndex(name));
            };
            let owner = self
                .store
                .tables()
                .into_iter()
                .find(|t| t.def().id == def.on)
                .map(|t| (t.name(), ObjectKind::Table))
                .or_else(|| {
                    self.views
                        .views()
                        .into_iter()
                        .find(|v| v.def.id == def.on)
                        .map(|v| (v.def.name.clone(), ObjectKind::View))
                });
            if let Some((relation, kind)) = owner {
                self.roles.check_owner(&session.role(), kind, &relation)?;
            }
            dropping.push(name);
        }
        for name in dropping {
            self.store.drop_index_def(&name)?;
        }
        Ok(Outcome::done("DROP INDEX"))
    }

    async fn create_table_as(
        &self,
        session: &Session,
        create: CreateTableAs,
    ) -> Result<Outcome, SluiceError> {
        if self.found(&create.name).is_some() {
            if create.if_not_exists {
                return Ok(Outcome::done("CREATE TABLE AS"));
            }
            return Err(sluice_catalog::CatalogError::DuplicateTable(create.name).into());
        }
        let (_, shown) = self
            .planner
            .plan_shown(ast::Statement::Query(create.query.clone()), &session.role())
            .await?;
        let columns: Vec<(String, String)> = shown
            .fields()
            .iter()
            .map(|f| {
                // A computed numeric keeps its values' scale, as
                // PostgreSQL's unconstrained numeric does per value.
                let ty = match f.data_type() {
                    arrow::datatypes::DataType::Decimal128(p, s) if *s >= 0 => {
                        format!("numeric({p},{s})")
                    }
                    _ => crate::types::PgType::of_field(f).format(),
                };
                (f.name().clone(), ty)
            })
            .collect();
        let table = create.table(&columns)?;
        let names: Vec<String> = table.table.columns.iter().map(|c| c.name.clone()).collect();
        self.table_statement(session, Statement::CreateTable(Box::new(table)))
            .await?;
        // Filled in one statement: if the rows cannot be written, the table
        // is not left behind.
        let quoted: Vec<String> = names
            .iter()
            .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
            .collect();
        let insert = format!(
            "INSERT INTO \"{}\" ({}) {}",
            create.name.replace('"', "\"\""),
            quoted.join(", "),
            create.query
        );
        let filled = match sluice_sql::parse_sql(&insert) {
            Ok(stmt) => self.change_statement(session, stmt).await,
            Err(e) => Err(e.into()),
        };
        match filled {
            Ok(Outcome::Done { rows, .. }) => Ok(Outcome::Done {
                tag: "SELECT",
                rows: Some(rows.unwrap_or(0)),
            }),
            Ok(_) => Ok(Outcome::done("SELECT")),
            Err(e) => {
                let _ = self
                    .table_statement(
                        session,
                        Statement::DropTable {
                            names: vec![create.name.clone()],
                            if_exists: true,
                        },
                    )
                    .await;
                Err(e)
            }
        }
    }

    fn rename(
        &self,
        session: &Session,
        kind: RelationKind,
        name: &str,
        to: &str,
        if_exists: bool,
    ) -> Result<Outcome, SluiceError> {
        let tag = match kind {
            RelationKind::Table => "ALTER TABLE",
            RelationKind::View => "ALTER VIEW",
            RelationKind::MaterializedView => "ALTER MATERIALIZED VIEW",
        };
        let found = match self.found(name) {
            Some(f) => f,
            None if if_exists => return Ok(Outcome::done(tag)),
            None => return Err(SluiceError::UndefinedTable(name.to_string())),
        };
        // ALTER TABLE renames any relation, as in PostgreSQL; the others
        // only their own kind.
        match (kind, found) {
            (RelationKind::View, Found::Table | Found::MaterializedView) => {
                return Err(SluiceError::WrongObjectType(name.to_string(), "view"))
            }
            (RelationKind::MaterializedView, Found::Table | Found::View) => {
                return Err(SluiceError::WrongObjectType(
                    name.to_string(),
                    "materialized view",
                ))
            }
            _ => {}
        }
        if self.found(to).is_some() {
            return Err(sluice_catalog::CatalogError::DuplicateTable(to.to_string()).into());
        }
        let role = session.role();
        match found {
            Found::MaterializedView => Err(SluiceError::Unsupported(
                "renaming a materialized view is not supported: its dataflow runs under its name"
                    .into(),
            )),
            Found::Table => {
                self.roles.check_owner(&role, ObjectKind::Table, name)?;
                // Materialized views, subscriptions and sinks hold the
                // table itself and name it in their definitions.
                self.check_dependents("table", name)
                    .map_err(|e| renaming(e, name))?;
                if self
                    .store
                    .table(name)
                    .is_some_and(|t| t.def().options.source.is_some())
                {
                    return Err(SluiceError::Unsupported(
                        "renaming a table a Kafka source feeds is not supported".into(),
                    ));
                }
                self.store.rename(name, to)?;
                self.roles.renamed(ObjectKind::Table, name, to)?;
                Ok(Outcome::done(tag))
            }
            Found::View => {
                self.roles.check_owner(&role, ObjectKind::Table, name)?;
                // The view's new name must not make a view read itself.
                let mut defs = self.store.query_views();
                for d in &mut defs {
                    if d.name == name {
                        d.name = to.to_string();
                    }
                }
                let renamed = defs.iter().find(|d| d.name == to);
                if renamed.is_some_and(|d| reads_through(&defs, &d.reads, to)) {
                    return Err(SluiceError::InvalidRecursion(to.to_string()));
                }
                self.store.rename(name, to)?;
                self.roles.renamed(ObjectKind::Table, name, to)?;
                Ok(Outcome::done(tag))
            }
        }
    }
}

/// A dependency refusal worded for a rename.
fn renaming(e: SluiceError, name: &str) -> SluiceError {
    match e {
        SluiceError::DependentObjects { dependent, .. } => SluiceError::Unsupported(format!(
            "cannot rename table {name} because {dependent} depends on it"
        )),
        other => other,
    }
}

/// Whether reading `reads`, through the views among `defs`, reaches
/// `name`: a view that would read itself.
fn reads_through(defs: &[QueryViewDef], reads: &[String], name: &str) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    let mut next: Vec<&str> = reads.iter().map(String::as_str).collect();
    while let Some(r) = next.pop() {
        if r == name {
            return true;
        }
        if seen.contains(&r) {
            continue;
        }
        seen.push(r);
        if let Some(d) = defs.iter().find(|d| d.name == r) {
            next.extend(d.reads.iter().map(String::as_str));
        }
    }
    false
}
