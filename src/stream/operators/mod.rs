//! The operators of a view's dataflow, one file each, every one an
//! [`operator::Operator`]: deltas in, deltas out, moved by the watermark,
//! written into a checkpoint and read back. Each file's header says what
//! state it keeps, what it checkpoints and what a watermark does to it.
//! Operators know nothing of how a query is compiled into them or how a
//! view's task runs them.

pub mod aggregate;
pub mod asof_join;
pub mod delta;
pub mod dynamic_filter;
pub mod group_table;
pub mod indexed_rows;
pub mod interval_join;
pub mod join;
pub mod operator;
pub mod over_window;
pub mod ranked_groups;
pub mod retract;
pub mod retract_collect;
pub mod rows;
pub mod shared_column;
pub mod top_n;
pub mod vectorized_groups;
