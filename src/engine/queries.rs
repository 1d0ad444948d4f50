//! Queries: a `SELECT` (or any statement answered with rows) planned and
//! run on the query threads, or answered from a view's index when it reads
//! one row by its key.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn query_statement(
        &self,
        session: &Session,
        stmt: Statement,
        sql: &str,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::Query(mut q) => {
                // The catalog rules read the text again: it names the
                // exported snapshot too.
                let exported;
                let sql = match self.export_snapshots(session, &mut q).await? {
                    true => {
                        exported = q.to_string();
                        exported.as_str()
                    }
                    false => sql,
                };
                if let ast::Statement::Query(query) = q.as_ref() {
                    if let Some(answer) = self.text_point_read(session, sql, query).await {
                        return Ok(answer);
                    }
                }
                let s = self.planner.compat_statement(sql, *q, &session.role().name);
                let (plan, columns) = self.planner.plan_shown(s, &session.role()).await?;
                // A view's row by its key given as literals: a lookup in
                // the view's index, as a prepared point read is.
                // A keyed table inside a block is read with the block's
                // writes, by the plan.
                let in_block = || session.transaction.lock().open;
                let read = PointRead::recognize(&plan)
                    .filter(|r| !(r.has_params() || r.reads_table() && in_block()));
                if let Some(read) = read {
                    return Ok(Outcome::Batches {
                        schema: columns,
                        batches: vec![read.execute(&self.views, &self.store, None).await?],
                        tag: "SELECT",
                    });
                }
                self.run_plan(session, plan, Some(columns), false).await
            }

            other => Err(misrouted("queries", &other)),
        }
    }
}
