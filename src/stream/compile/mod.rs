//! Compiling a view's query into its dataflow of operators
//! (`pipeline.rs`: the view's last stage and the checks that refuse what
//! cannot be kept exact; `graph/`: the stages of joins, aggregates below
//! them and Top-N, lifted out of the plan (`graph/row_stages.rs` for those
//! that pick or number rows) and run per delta (`graph/run.rs`);
//! `failed_rows.rs`: source rows on which a plan fails; `band.rs`: time
//! bands that make a join an interval join). It uses the operators below it and the views a query reads
//! (`view.rs`); the runner above it runs what it compiles.

#[cfg(test)]
mod accumulator_audit;
pub mod band;
pub mod failed_rows;
pub mod graph;
pub mod pipeline;
