//! Sluice: a streaming SQL database that speaks the PostgreSQL wire protocol.
//!
//! Data flows one way: the wire front end ([`server`]) parses statements
//! (crate `sluice-sql`), turns rows into validated Arrow batches
//! ([`ingest`]), appends them to the partitioned log ([`log`]), and answers
//! queries through DataFusion over that log ([`query`]).

pub mod auth;
pub mod checkpoint;
pub mod engine;
pub mod error;
pub mod http;
pub mod ingest;
pub mod log;
pub mod metrics;
pub mod query;
pub mod server;
pub mod sink;
pub mod source;
pub mod status;
pub mod store;
pub mod stream;
pub mod subscribe;
pub mod system;
pub mod transaction;
pub mod types;
