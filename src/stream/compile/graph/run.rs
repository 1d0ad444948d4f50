//! Running a view's joins: each delta of a source through every stage,
//! the slots the stage plans read, the rows on which a plan fails, and the
//! stages' state written into checkpoints and read back.

use super::*;

impl JoinGraph {
    /// Runs a delta of source `source` through every join, leaving each
    /// join's output (inserts, retractions) for the plans above. Returns
    /// the outputs by join. With `watermarks` (by source), each stage then
    /// moves the watermarks of its inputs that have one, and what that
    /// emits goes on up as well; `source` is then `NO_SOURCE` when no
    /// source's rows come with them. The first call of a graph that did
    /// not come from a checkpoint first sends up what each operator holds
    /// before any input ([`Operator::start`]).
    pub async fn propagate(
        &mut self,
        source: usize,
        insert: &[RecordBatch],
        retract: &[RecordBatch],
        watermarks: Option<&[Option<i64>]>,
        ctx: Arc<TaskContext>,
    ) -> Result<Vec<Delta>, SluiceError> {
        let mut outputs: Vec<Delta> = Vec::with_capacity(self.stages.len());
        let starting = std::mem::take(&mut self.unstarted);
        for j in 0..self.stages.len() {
            let mut out = match starting {
                true => self.stages[j].operator.start()?,
                false => Delta::default(),
            };
            for side in 0..self.stages[j].inputs.len() {
                let input = &self.stages[j].inputs[side];
                // An input that reads no table (`FROM (VALUES ...)`) has
                // its rows once, when the graph starts.
                let constant = starting && input.sources.is_empty() && input.stages.is_empty();
                let reads_delta = input.sources.contains(&source)
                    || constant
                    || input
                        .stages
                        .iter()
                        .any(|&c| !outputs[c].insert.is_empty() || !outputs[c].retract.is_empty());
                if !reads_delta {
                    continue;
                }
                let plan = input.plan.clone();
                let children = input.stages.clone();
                let ins = match constant {
                    true => collect(plan.clone(), ctx.clone())
                        .await?
                        .into_iter()
                        .filter(|b| b.num_rows() > 0)
                        .collect(),
                    false => {
                        self.run(
                            &plan,
                            source,
                            insert,
                            &children,
                            &outputs,
                            true,
                            ctx.clone(),
                        )
                        .await?
                    }
                };
                let ret = self
                    .run(
                        &plan,
                        source,
                        retract,
                        &children,
                        &outputs,
                        false,
                        ctx.clone(),
                    )
                    .await?;
                let o = self.stages[j].operator.apply(
                    side,
                    &Delta {
                        insert: ins,
                        retract: ret,
                    },
                )?;
                // Numbered past every slot and the last aggregate's input.
                let slot = self.source_slots.len() + self.stages.len() + 1 + j;
                for (row, sign, e) in self.stages[j].operator.take_failed_rows() {
                    self.failed.lock().record_row(slot, &row, sign, &e)?;
                }
                out.insert.extend(o.insert);
                out.retract.extend(o.retract);
            }
            if let Some(marks) = watermarks {
                for side in 0..self.stages[j].inputs.len() {
                    let mark = self.stages[j].inputs[side]
                        .watermark
                        .and_then(|s| marks.get(s).copied().flatten());
                    if let Some(w) = mark {
                        let o = self.stages[j].operator.advance_watermark(side, w)?;
                        out.insert.extend(o.insert);
                        out.retract.extend(o.retract);
                    }
                }
            }
            outputs.push(out);
        }
        Ok(outputs)
    }

    /// Runs one input plan with `rows` in the slot of `source` (the
    /// others empty) and the given joins' inserted (or retracted) rows in
    /// theirs.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        source: usize,
        rows: &[RecordBatch],
        joins: &[usize],
        outputs: &[Delta],
        inserted: bool,
        ctx: Arc<TaskContext>,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let child_rows = |c: usize| match inserted {
            true => &outputs[c].insert,
            false => &outputs[c].retract,
        };
        if rows.is_empty() && joins.iter().all(|&c| child_rows(c).is_empty()) {
            return Ok(Vec::new());
        }
        self.fill(source, rows, outputs, inserted);
        let result = self
            .collect_rows_apart(plan, ctx, if inserted { 1 } else { -1 })
            .await;
        self.clear();
        Ok(result?.into_iter().filter(|b| b.num_rows() > 0).collect())
    }

    /// `plan` over what the slots hold, with the rows on which it fails set
    /// aside (see [`failed_rows`](super::super::failed_rows)); `sign` is +1 for
    /// inserted rows, -1 for rows taken back.
    pub async fn collect_rows_apart(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        ctx: Arc<TaskContext>,
        sign: i64,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        // The slots are listed only when a row fails: not per delta.
        let slots = || -> Vec<DeltaSlot> {
            self.source_slots
                .iter()
                .chain(self.stages.iter().map(|s| &s.slot))
                .cloned()
                .collect()
        };
        super::super::failed_rows::collect_rows_apart(plan, ctx, slots, sign, &self.failed).await
    }

    /// Counts a row of the view's last aggregate's input as failed (see
    /// [`failed_rows`](super::super::failed_rows)).
    pub fn record_failed_row(
        &self,
        row: &RecordBatch,
        sign: i64,
        error: &SluiceError,
    ) -> Result<(), SluiceError> {
        // Numbered past every slot: these rows come from no one slot.
        let slot = self.source_slots.len() + self.stages.len();
        self.failed.lock().record_row(slot, row, sign, error)
    }

    /// The error reads of the view fail with while rows of its sources fail.
    pub fn failed_rows_error(&self) -> Option<SluiceError> {
        self.failed.lock().error()
    }

    /// The failed rows, for a checkpoint.
    pub fn failed_rows(&self) -> Vec<sluice_catalog::FailedRowEntry> {
        self.failed.lock().saved()
    }

    /// The failed rows a checkpoint kept.
    pub fn restore_failed_rows(&self, saved: &[sluice_catalog::FailedRowEntry]) {
        self.failed.lock().restore(saved);
    }

    /// Puts `rows` in the slot of `source`, and every join's inserted (or
    /// retracted) rows in its leaf's slot.
    pub fn fill(&self, source: usize, rows: &[RecordBatch], outputs: &[Delta], inserted: bool) {
        for (i, slot) in self.source_slots.iter().enumerate() {
            *slot.lock() = match i == source {
                true => rows.to_vec(),
                false => Vec::new(),
            };
        }
        for (stage, out) in self.stages.iter().zip(outputs) {
            *stage.slot.lock() = match inserted {
                true => out.insert.clone(),
                false => out.retract.clone(),
            };
        }
    }

    pub fn clear(&self) {
        for slot in &self.source_slots {
            slot.lock().clear();
        }
        for stage in &self.stages {
            stage.slot.lock().clear();
        }
    }

    /// Every stage's state for a checkpoint, part by part (a join's
    /// sides), as the batches the stages hold. When every stage only
    /// gained rows since the last capture, that is all it holds, and the
    /// second value is false; otherwise (or when `whole` asks) it holds the
    /// whole state (true).
    pub fn capture(
        &mut self,
        whole: bool,
    ) -> Result<Option<(Vec<OperatorPart>, bool)>, SluiceError> {
        if self.stages.is_empty() {
            return Ok(None);
        }
        if whole || self.capture_whole_next {
            return self.capture_whole();
        }
        let mut gains = Vec::with_capacity(self.stages.len());
        for stage in &mut self.stages {
            gains.push(stage.operator.appended_since_capture()?);
        }
        if gains.iter().all(|g| g.is_some()) {
            let parts = gains.into_iter().map(|g| g.unwrap_or_default()).collect();
            return Ok(Some((numbered_parts(parts), false)));
        }
        self.capture_whole()
    }

    /// Every operator's whole state (which resets what each has gained).
    fn capture_whole(&mut self) -> Result<Option<(Vec<OperatorPart>, bool)>, SluiceError> {
        self.capture_whole_next = false;
        let mut parts = Vec::with_capacity(self.stages.len());
        for stage in &mut self.stages {
            parts.push(stage.operator.snapshot()?);
        }
        Ok(Some((numbered_parts(parts), true)))
    }

    /// Puts back what [`JoinGraph::capture`] wrote, in the order written
    /// (a whole state, then what it gained). `shared` says the checkpoint
    /// numbers each stage once; before stages were shared, it numbered
    /// them as lifted (see `lifted_stages`), and the next capture then
    /// writes them whole, in today's numbers.
    pub fn restore(&mut self, files: &[RestoredPart], shared: bool) -> Result<(), SluiceError> {
        // The checkpoint's state already went up through the graph,
        // including the rows each operator had before any input.
        self.unstarted = false;
        let renumbered = !shared && self.lifted_stages.iter().enumerate().any(|(i, &s)| i != s);
        for file in files {
            match file.id {
                Some(id) => {
                    self.restore_part(id.stage, id.part as usize, &file.rows, renumbered)?
                }
                None => {
                    for b in &file.rows {
                        self.restore_ipc_parts(b, renumbered)?;
                    }
                }
            }
        }
        self.capture_whole_next |= renumbered;
        Ok(())
    }

    fn restore_part(
        &mut self,
        stage: u32,
        part: usize,
        rows: &[RecordBatch],
        renumbered: bool,
    ) -> Result<(), SluiceError> {
        let mut stage = stage as usize;
        if renumbered {
            let Some(&now) = self.lifted_stages.get(stage) else {
                return Err(bad_state("an operator the view does not have"));
            };
            // A repeated aggregate's copy held what the first one holds.
            if self.lifted_stages.iter().position(|&s| s == now) != Some(stage) {
                return Ok(());
            }
            stage = now;
        }
        let stage = self
            .stages
            .get_mut(stage)
            .ok_or_else(|| bad_state("an operator the view does not have"))?;
        stage.operator.restore(part, rows)
    }

    /// A state file of an earlier version: a row per stage and part, the
    /// rows in Arrow IPC form.
    fn restore_ipc_parts(&mut self, b: &RecordBatch, renumbered: bool) -> Result<(), SluiceError> {
        let (Some(op), Some(side), Some(state)) = (
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>(),
            b.column(1)
                .as_any()
                .downcast_ref::<arrow::array::UInt8Array>(),
            b.column(2)
                .as_any()
                .downcast_ref::<arrow::array::BinaryArray>(),
        ) else {
            return Err(bad_state("unexpected columns"));
        };
        for i in 0..b.num_rows() {
            let reader = arrow::ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(state.value(i)),
                None,
            )?;
            let rows = reader.collect::<Result<Vec<_>, _>>()?;
            self.restore_part(op.value(i), side.value(i) as usize, &rows, renumbered)?;
        }
        Ok(())
    }
}

/// Stages' state parts, each named by its stage and part.
fn numbered_parts(stages: Vec<Vec<StatePart>>) -> Vec<OperatorPart> {
    let mut out = Vec::new();
    for (stage, parts) in stages.into_iter().enumerate() {
        for (part, rows) in parts.into_iter().enumerate() {
            out.push(OperatorPart {
                id: StatePartId {
                    stage: stage as u32,
                    part: part as u32,
                },
                rows,
            });
        }
    }
    out
}
