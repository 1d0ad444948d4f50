//! Materialized views: `CREATE`, `DROP`, `EXPLAIN` of one or of its
//! definition, `ALTER ... REBUILD` and `FLUSH`, with backfill progress sent
//! as NOTICEs while they run.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn view_statement(
        &self,
        session: &Session,
        stmt: Statement,
        notices: &Notices,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let role = session.role();
                // A view is read with its own grant: its owner must be able
                // to read what it reads.
                for (kind, name) in self.relations_named(&cv.query) {
                    self.roles
                        .check(&role, kind, &name, sluice_sql::Privilege::Select)?;
                }
                let existed = self.views.view(&cv.name).is_some();
                self.views
                    .create(&cv.name, cv.if_not_exists, &cv.query, emit)
                    .await?;
                if !existed {
                    self.roles
                        .created(&role, ObjectKind::View, std::slice::from_ref(&cv.name))?;
                }
                Ok(Outcome::done("CREATE MATERIALIZED VIEW"))
            }
            Statement::DropView { names, if_exists } => {
                for name in &names {
                    if self.views.view(name).is_none() {
                        if self.store.table(name).is_some() {
                            return Err(SluiceError::WrongObjectType(
                                name.clone(),
                                "materialized view",
                            ));
                        }
                        if !if_exists {
                            return Err(SluiceError::UndefinedTable(name.clone()));
                        }
                    }
                }
                for name in &names {
                    if self.views.view(name).is_some() {
                        self.roles
                            .check_owner(&session.role(), ObjectKind::View, name)?;
                        self.check_dependents("materialized view", name)?;
                    }
                }
                for name in &names {
                    if self.views.view(name).is_some() {
                        self.views.drop_view(name)?;
                        self.roles
                            .dropped(ObjectKind::View, std::slice::from_ref(name))?;
                    }
                }
                Ok(Outcome::done("DROP MATERIALIZED VIEW"))
            }
            Statement::Flush => {
                let views = self.views.clone();
                let flush = async move { views.flush().await };
                self.with_progress_notices(notices, flush, |views| {
                    views
                        .views()
                        .iter()
                        .filter_map(|v| v.backfill_progress().map(|p| (v.def.name.clone(), p)))
                        .collect()
                })
                .await?;
                Ok(Outcome::done("FLUSH"))
            }
            Statement::ShowViews => Err(SluiceError::Unsupported("SHOW MATERIALIZED VIEWS".into())),
            Statement::ExplainView { name } => {
                let view = self
                    .views
                    .view(&name)
                    .ok_or_else(|| match self.store.table(&name) {
                        Some(_) => SluiceError::WrongObjectType(name.clone(), "materialized view"),
                        None => SluiceError::UndefinedTable(name.clone()),
                    })?;
                plan_lines(&view.explain)
            }
            Statement::ExplainCreateView(cv) => {
                let emit = EmitOptions {
                    emit_on_window_close: cv.emit_on_window_close,
                    allowed_lateness_us: cv.allowed_lateness_us,
                };
                let lines = self.views.explain(&cv.query, emit).await?;
                plan_lines(&lines)
            }
            Statement::RebuildView { name, from } => {
                if self.views.view(&name).is_some() {
                    self.roles
                        .check_owner(&session.role(), ObjectKind::View, &name)?;
                }
                self.rebuild(notices, &name, &from).await
            }
            other => Err(misrouted("views", &other)),
        }
    }

    /// `ALTER MATERIALIZED VIEW v REBUILD [FROM ...]`, reporting progress
    /// as NOTICEs while it runs.
    pub(crate) async fn rebuild(
        &self,
        notices: &Notices,
        name: &str,
        from: &StartAt,
    ) -> Result<Outcome, SluiceError> {
        let from_us = match from {
            StartAt::Timestamp(text) => Some(timestamp_us(text)?),
            _ => None,
        };
        let views = self.views.clone();
        let view = name.to_string();
        let rebuild = async move { views.rebuild(&view, from_us).await };
        let view = name.to_string();
        self.with_progress_notices(notices, rebuild, move |views| {
            views
                .progress(&view)
                .map(|p| vec![(view.clone(), p)])
                .unwrap_or_default()
        })
        .await?;
        Ok(Outcome::done("ALTER MATERIALIZED VIEW"))
    }

    /// Runs `work` on its own task (it finishes even if the client goes
    /// away) and gives `notices` each backfill's progress every second
    /// (the first after 250 ms) until it is done.
    pub(crate) async fn with_progress_notices<F>(
        &self,
        notices: &Notices,
        work: F,
        progress: impl Fn(&ViewManager) -> Vec<(String, BackfillProgress)>,
    ) -> Result<(), SluiceError>
    where
        F: std::future::Future<Output = Result<(), SluiceError>> + Send + 'static,
    {
        let mut task = tokio::spawn(work.in_current_span());
        // The first report early (a short rebuild still shows one), then
        // one a second.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + std::time::Duration::from_millis(250),
            std::time::Duration::from_secs(1),
        );
        loop {
            tokio::select! {
                done = &mut task => {
                    return done.map_err(|e| SluiceError::Internal(e.to_string()))?;
                }
                _ = tick.tick() => {
                    for (name, p) in progress(&self.views) {
                        // A client that went away gets no more; the work
                        // goes on.
                        let _ = notices.send(progress_message(&name, &p));
                    }
                }
            }
        }
    }
}

/// Lines of a plan as EXPLAIN answers them: one text column.
pub(crate) fn plan_lines(lines: &[String]) -> Result<Outcome, SluiceError> {
    let schema = planner::plan_lines_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::StringArray::from_iter_values(lines))],
    )?;
    Ok(Outcome::Batches {
        schema,
        batches: vec![batch],
        tag: "SELECT",
    })
}

/// "rebuild of \"v\": 4200000 of 10000000 rows (42.0%), 2100000 rows/s, about 3 s left"
pub(crate) fn progress_message(view: &str, p: &BackfillProgress) -> String {
    let percent = if p.total_rows > 0 {
        p.done_rows as f64 * 100.0 / p.total_rows as f64
    } else {
        0.0
    };
    let eta = match p.eta_seconds {
        Some(s) => format!(", about {} s left", s.ceil() as u64),
        None => String::new(),
    };
    format!(
        "{} of \"{view}\": {} of {} rows ({percent:.1}%), {} rows/s{eta}",
        p.kind,
        p.done_rows,
        p.total_rows,
        p.rows_per_second.round() as u64
    )
}
