//! Turning client rows into validated Arrow batches of a table's data schema:
//! text values from COPY, literal INSERTs and prepared INSERTs with bound
//! parameters ([`RowStager`], [`PreparedInsert`]), the COPY text
//! and CSV formats ([`CopyParser`]), and batches planned by DataFusion
//! ([`conform_batch`]). Nothing here writes; a statement's batches go to the
//! log only once all of them are valid.

mod binary_copy;
mod copy;
mod error;
mod prepared;
mod stager;

pub use copy::CopyParser;
pub use error::{IngestError, RowPlace};
pub use prepared::{BoundParam, PreparedInsert};
pub use stager::{conform_batch, implicit_insert_columns, RowStager};
