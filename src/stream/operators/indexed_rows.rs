//! Rows that may be taken back one by one, each found by its arrow-row
//! bytes: the held rows of a view whose input takes rows back (a filter
//! over a table that takes UPDATE and DELETE, an over-window's changed
//! rows).
//!
//! The rows stay in the batches they came in; an index maps each row's
//! bytes to where its copies are, and a row taken back is only marked
//! gone, so taking back k rows costs k look-ups, not a pass over every
//! row. A read gets each batch less its gone rows, filtered once after
//! the batch last changed. When gone rows outnumber live ones, or the
//! batches grow many, the live rows are written into one batch and the
//! index built again (a cost spread over the changes that led to it).

use std::collections::HashMap;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};

use crate::error::SluiceError;

/// Batches past which the live rows are put into one.
const MAX_BATCHES: usize = 64;

struct HeldBatch {
    rows: RecordBatch,
    /// Rows taken back, when any are.
    gone: Option<Vec<bool>>,
    gone_count: usize,
    /// `rows` less the gone ones, as a read gets them; `None` until
    /// computed after the last change.
    shown: Option<RecordBatch>,
}

pub struct IndexedRows {
    schema: SchemaRef,
    converter: RowConverter,
    batches: Vec<HeldBatch>,
    /// Row bytes to the (batch, row) of each live copy.
    index: HashMap<Box<[u8]>, Vec<(u32, u32)>, ahash::RandomState>,
    live: usize,
    gone: usize,
}

impl IndexedRows {
    pub fn new(schema: SchemaRef) -> Result<IndexedRows, SluiceError> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(IndexedRows {
            converter: RowConverter::new(fields)?,
            schema,
            batches: Vec::new(),
            index: HashMap::default(),
            live: 0,
            gone: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Bytes the batches and the index take.
    pub fn memory_bytes(&self) -> u64 {
        let batches: usize = self
            .batches
            .iter()
            .map(|b| b.rows.get_array_memory_size())
            .sum();
        let index: usize = self.index.keys().map(|k| k.len() + 32).sum();
        (batches + index) as u64
    }

    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let id = self.batches.len() as u32;
        let encoded = self.converter.convert_columns(batch.columns())?;
        for (i, row) in encoded.iter().enumerate() {
            self.index
                .entry(Box::from(row.as_ref()))
                .or_default()
                .push((id, i as u32));
        }
        self.live += batch.num_rows();
        self.batches.push(HeldBatch {
            rows: batch.clone(),
            gone: None,
            gone_count: 0,
            shown: Some(batch.clone()),
        });
        if self.batches.len() > MAX_BATCHES {
            // The newer, smaller batches go into one; all of them only
            // when they outgrow the first (so each row is moved a few
            // times over its life, not once per MAX_BATCHES changes).
            let first = self.batches[0].rows.num_rows() - self.batches[0].gone_count;
            match self.live - first < first {
                true => self.merge_from(1)?,
                false => self.compact()?,
            }
        }
        Ok(())
    }

    /// Puts the live rows of the batches from `start` on into one.
    fn merge_from(&mut self, start: usize) -> Result<(), SluiceError> {
        let tail = self.batches.split_off(start);
        let mut live = Vec::with_capacity(tail.len());
        for (offset, mut held) in tail.into_iter().enumerate() {
            let id = (start + offset) as u32;
            let encoded = self.converter.convert_columns(held.rows.columns())?;
            let gone = held.gone.as_deref().unwrap_or_default();
            for (i, row) in encoded.iter().enumerate() {
                if gone.get(i).copied().unwrap_or(false) {
                    continue;
                }
                if let Some(copies) = self.index.get_mut(row.as_ref()) {
                    copies.retain(|p| *p != (id, i as u32));
                    if copies.is_empty() {
                        self.index.remove(row.as_ref());
                    }
                }
            }
            self.live -= held.rows.num_rows() - held.gone_count;
            self.gone -= held.gone_count;
            live.push(match held.shown.take() {
                Some(s) => s,
                None => {
                    let keep: BooleanArray = gone.iter().map(|g| Some(!g)).collect();
                    compute::filter_record_batch(&held.rows, &keep)?
                }
            });
        }
        let live: Vec<RecordBatch> = live.into_iter().filter(|b| b.num_rows() > 0).collect();
        if live.is_empty() {
            return Ok(());
        }
        let one = compute::concat_batches(&self.schema, &live)?;
        self.add(&one)
    }

    /// Takes one copy of each row of `batch` back (a row not held takes
    /// nothing, as before the index).
    pub fn take(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let encoded = self.converter.convert_columns(batch.columns())?;
        for row in encoded.iter() {
            let Some(copies) = self.index.get_mut(row.as_ref()) else {
                continue;
            };
            let Some((b, i)) = copies.pop() else {
                continue;
            };
            if copies.is_empty() {
                self.index.remove(row.as_ref());
            }
            let held = &mut self.batches[b as usize];
            let gone = held
                .gone
                .get_or_insert_with(|| vec![false; held.rows.num_rows()]);
            gone[i as usize] = true;
            held.gone_count += 1;
            held.shown = None;
            self.live -= 1;
            self.gone += 1;
        }
        if self.gone > self.live.max(1024) {
            self.compact()?;
        }
        Ok(())
    }

    /// The live rows, batch by batch.
    pub fn batches(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        let mut out = Vec::with_capacity(self.batches.len());
        for held in &mut self.batches {
            let shown = match &held.shown {
                Some(s) => s.clone(),
                None => {
                    let keep: BooleanArray = held
                        .gone
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .map(|g| Some(!g))
                        .collect();
                    let s = match held.gone_count {
                        0 => held.rows.clone(),
                        _ => compute::filter_record_batch(&held.rows, &keep)?,
                    };
                    held.shown = Some(s.clone());
                    s
                }
            };
            if shown.num_rows() > 0 {
                out.push(shown);
            }
        }
        Ok(out)
    }

    /// Puts the live rows into one batch and indexes them again.
    fn compact(&mut self) -> Result<(), SluiceError> {
        let live = self.batches()?;
        self.batches.clear();
        self.index.clear();
        self.live = 0;
        self.gone = 0;
        if live.is_empty() {
            return Ok(());
        }
        let one = compute::concat_batches(&self.schema, &live)?;
        self.add(&one)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn held(rows: &mut IndexedRows) -> Vec<i64> {
        let mut out: Vec<i64> = rows
            .batches()
            .unwrap()
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn takes_back_one_copy_at_a_time_and_compacts() {
        let mut rows = IndexedRows::new(batch(&[]).schema()).unwrap();
        rows.add(&batch(&[1, 2, 2, 3])).unwrap();
        rows.add(&batch(&[2, 4])).unwrap();
        rows.take(&batch(&[2, 3, 5])).unwrap();
        assert_eq!(held(&mut rows), vec![1, 2, 2, 4]);
        for i in 0..200 {
            rows.add(&batch(&[i + 10])).unwrap();
            rows.take(&batch(&[i + 10])).unwrap();
        }
        assert!(rows.batches.len() <= MAX_BATCHES);
        assert_eq!(held(&mut rows), vec![1, 2, 2, 4]);
        assert_eq!(rows.len(), 4);
        // A large first batch: the newer ones merge among themselves, and
        // every row is still found.
        let many: Vec<i64> = (1000..3000).collect();
        rows.add(&batch(&many)).unwrap();
        rows.compact().unwrap();
        for i in 0..150 {
            rows.add(&batch(&[i + 5000, i + 5000])).unwrap();
        }
        assert!(rows.batches.len() <= MAX_BATCHES);
        assert_eq!(rows.batches[0].rows.num_rows(), 2004);
        let gone: Vec<i64> = (0..150).map(|i| i + 5000).chain(1000..1500).collect();
        rows.take(&batch(&gone)).unwrap();
        assert_eq!(rows.len(), 4 + 2000 + 300 - 650);
        let expected: Vec<i64> = [1, 2, 2, 4]
            .into_iter()
            .chain(1500..3000)
            .chain((0..150).map(|i| i + 5000))
            .collect();
        let mut expected = expected;
        expected.sort();
        assert_eq!(held(&mut rows), expected);
    }
}
