//! Prometheus metrics: what operators alert on.
//!
//! Events (statements, checkpoints, connections) are counted as they
//! happen in [`METRICS`], one per process. Everything that is a state
//! (log end offsets, sizes, lag, freshness, late rows) is computed when
//! `/metrics` is scraped, from the same `sluice_catalog` tables SQL users
//! read, so a scrape and a query never disagree.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;
use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::SluiceError;

type Labels = Vec<(String, String)>;

/// The event counters of this process.
pub struct Metrics {
    statements: Family<Labels, Counter>,
    statement_seconds: Histogram,
    checkpoints: Family<Labels, Counter>,
    checkpoint_seconds: Histogram,
    view_replayed_rows: Counter,
    connections: Counter,
    connections_refused: Counter,
    object_store_failures: Family<Labels, Counter>,
    auth_failures: Family<Labels, Counter>,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let metrics = Metrics {
        statements: Family::default(),
        // 100 us to about 100 s.
        statement_seconds: Histogram::new(exponential_buckets(0.0001, 4.0, 11)),
        checkpoints: Family::default(),
        checkpoint_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
        view_replayed_rows: Counter::default(),
        connections: Counter::default(),
        connections_refused: Counter::default(),
        object_store_failures: Family::default(),
        auth_failures: Family::default(),
    };
    // Failures count from 0, so that a rate over them exists before the
    // first one.
    for operation in ["put", "get", "list", "delete"] {
        metrics.object_store_failure_count(operation);
    }
    for reason in AUTH_FAILURE_REASONS {
        metrics.auth_failure_count(reason);
    }
    metrics
});

impl Metrics {
    /// A statement ended; `kind` is its first word (see [`statement_kind`]).
    pub fn statement(&self, kind: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.statements
            .get_or_create(&vec![
                ("kind".into(), kind.into()),
                ("outcome".into(), outcome.into()),
            ])
            .inc();
    }

    /// Times a query message (a simple query, or an Execute) from its
    /// arrival until its last result is sent; observed when dropped.
    pub fn round_trip(&'static self) -> RoundTrip {
        RoundTrip {
            started: std::time::Instant::now(),
            metrics: self,
        }
    }

    /// A view was computed at a position of the log (`AS OF`), replaying
    /// `rows` offsets of its tables from a kept checkpoint or its start.
    pub fn view_replayed_at_position(&self, rows: u64) {
        self.view_replayed_rows.inc_by(rows);
    }

    /// A checkpoint attempt ended.
    pub fn checkpoint(&self, ok: bool, elapsed: Duration) {
        let outcome = if ok { "committed" } else { "failed" };
        self.checkpoints
            .get_or_create(&vec![("outcome".into(), outcome.into())])
            .inc();
        if ok {
            self.checkpoint_seconds.observe(elapsed.as_secs_f64());
        }
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// An object-store request failed (after its retries).
    pub fn object_store_failure(&self, operation: &str) {
        self.object_store_failure_count(operation).inc();
    }

    /// A login was refused; `reason` is one of [`AUTH_FAILURE_REASONS`].
    pub fn auth_failure(&self, reason: &str) {
        self.auth_failure_count(reason).inc();
    }

    fn auth_failure_count(&self, reason: &str) -> Counter {
        self.auth_failures
            .get_or_create(&vec![("reason".into(), reason.into())])
            .clone()
    }

    fn object_store_failure_count(&self, operation: &str) -> Counter {
        self.object_store_failures
            .get_or_create(&vec![("operation".into(), operation.into())])
            .clone()
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "sluice_statements",
            "Statements run, by kind (first word) and outcome",
            self.statements.clone(),
        );
        r.register(
            "sluice_statement_duration_seconds",
            "How long each query message (a simple query, or an Execute) took, its results sent included",
            self.statement_seconds.clone(),
        );
        r.register(
            "sluice_checkpoints",
            "View checkpoint attempts, by outcome",
            self.checkpoints.clone(),
        );
        r.register(
            "sluice_checkpoint_duration_seconds",
            "How long committed view checkpoints took",
            self.checkpoint_seconds.clone(),
        );
        r.register(
            "sluice_view_replayed_rows",
            "Offsets of the log replayed to compute materialized views at a position (AS OF), from a checkpoint a cut keeps or from the view's start",
            self.view_replayed_rows.clone(),
        );
        r.register(
            "sluice_connections",
            "Client connections accepted since start-up",
            self.connections.clone(),
        );
        r.register(
            "sluice_connections_refused",
            "Connections refused by --max-connections since start-up",
            self.connections_refused.clone(),
        );
        r.register(
            "sluice_object_store_failures",
            "Object-store requests that failed after their retries, by operation (put, get, list, delete)",
            self.object_store_failures.clone(),
        );
        r.register(
            "sluice_auth_failures",
            "Logins refused since start-up, by reason (password: a wrong password or an unknown role, which look the same; no_login: a role without LOGIN; no_encryption: a plain connection where TLS is required)",
            self.auth_failures.clone(),
        );
    }
}

/// Why a login may be refused, as `sluice_auth_failures` labels it.
pub const AUTH_FAILURE_REASONS: [&str; 3] = ["password", "no_login", "no_encryption"];

/// A query message being timed (see [`Metrics::round_trip`]).
pub struct RoundTrip {
    started: std::time::Instant,
    metrics: &'static Metrics,
}

impl Drop for RoundTrip {
    fn drop(&mut self) {
        self.metrics
            .statement_seconds
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// What the statements counter calls a statement: its first word
/// (`select`, `insert`, `fetch`, ...), or `other`.
pub fn statement_kind(sql: &str) -> String {
    let word: String = sql
        .trim_start_matches(|c: char| c.is_whitespace() || c == '(')
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    match word.to_ascii_lowercase().as_str() {
        "" => "other".into(),
        w @ ("select" | "insert" | "update" | "delete" | "copy" | "fetch" | "declare" | "close"
        | "begin" | "start" | "commit" | "rollback" | "end" | "savepoint" | "release"
        | "create" | "drop" | "alter" | "flush" | "vacuum" | "set" | "show" | "reset"
        | "with" | "values" | "explain" | "prepare" | "execute" | "deallocate" | "discard"
        | "listen" | "unlisten" | "abort" | "table") => w.into(),
        _ => "other".into(),
    }
}

/// A gauge family filled from a query's rows: the label columns, then
/// the value column.
struct FromRows {
    name: &'static str,
    help: &'static str,
    sql: &'static str,
    labels: &'static [&'static str],
}

const FROM_ROWS: &[FromRows] = &[
    FromRows {
        name: "sluice_partition_end_offset",
        help: "Committed end offset of each table partition (records appended since the table was created)",
        sql: "SELECT table_name, CAST(partition AS VARCHAR), end_offset FROM sluice_catalog.partitions",
        labels: &["table", "partition"],
    },
    FromRows {
        name: "sluice_table_records",
        help: "Records appended to each table since it was created (all partitions)",
        sql: "SELECT table_name, SUM(end_offset) FROM sluice_catalog.partitions GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_table_local_bytes",
        help: "Bytes of each table's log on local disk",
        sql: "SELECT table_name, SUM(bytes) FROM sluice_catalog.partitions GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_table_remote_bytes",
        help: "Bytes of each table's closed segments in the object store",
        sql: "SELECT table_name, SUM(remote_bytes) FROM sluice_catalog.partitions GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_table_ingested_bytes",
        help: "Bytes of records committed to each table since start-up",
        sql: "SELECT table_name, ingested_bytes FROM sluice_catalog.tables",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_retention_pinned_bytes",
        help: "Bytes of each table's segments that retention keeps because a cut needs them (per cut)",
        sql: "SELECT cut_name, table_name, bytes_pinned FROM sluice_catalog.cuts",
        labels: &["cut", "table"],
    },
    FromRows {
        name: "sluice_retention_pinned_segments",
        help: "Times retention kept a segment of each table because a cut needed it, since start-up",
        sql: "SELECT table_name, SUM(pinned_segments) FROM sluice_catalog.partitions GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_compaction_runs",
        help: "Compaction passes over each keyed table since start-up (all partitions)",
        sql: "SELECT table_name, SUM(compactions) FROM sluice_catalog.partitions WHERE compactions IS NOT NULL GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_compaction_reclaimed_bytes",
        help: "Object-store bytes compaction reclaimed from each keyed table since start-up",
        sql: "SELECT table_name, SUM(compacted_bytes_reclaimed) FROM sluice_catalog.partitions WHERE compactions IS NOT NULL GROUP BY table_name",
        labels: &["table"],
    },
    FromRows {
        name: "sluice_lag_records",
        help: "Committed records a view has not applied, or a subscription has not committed, per source partition (as sluice_catalog.lag)",
        sql: "SELECT consumer, kind, source, CAST(partition AS VARCHAR), lag_records FROM sluice_catalog.lag",
        labels: &["consumer", "kind", "source", "partition"],
    },
    FromRows {
        name: "sluice_lag_seconds",
        help: "Age of the oldest record a consumer has not processed, per source partition (view freshness)",
        sql: "SELECT consumer, kind, source, CAST(partition AS VARCHAR), lag_seconds FROM sluice_catalog.lag WHERE lag_seconds IS NOT NULL",
        labels: &["consumer", "kind", "source", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_high_watermark",
        help: "End of each Kafka partition feeding a table, as the broker last reported it",
        sql: "SELECT table_name, topic, CAST(partition AS VARCHAR), high_watermark FROM sluice_catalog.sources",
        labels: &["table", "topic", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_next_offset",
        help: "Next Kafka offset a source reads, as committed with the table's rows",
        sql: "SELECT table_name, topic, CAST(partition AS VARCHAR), next_offset FROM sluice_catalog.sources",
        labels: &["table", "topic", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_lag_records",
        help: "Records of a Kafka partition its table has not read yet",
        sql: "SELECT table_name, topic, CAST(partition AS VARCHAR), lag_records FROM sluice_catalog.sources",
        labels: &["table", "topic", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_dead_letters",
        help: "Records of a Kafka partition that did not parse and went to the dead-letter table, since start-up",
        sql: "SELECT table_name, topic, CAST(partition AS VARCHAR), dead_letters FROM sluice_catalog.sources",
        labels: &["table", "topic", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_skipped_records",
        help: "Records Kafka's retention deleted before the source read them, since start-up",
        sql: "SELECT table_name, topic, CAST(partition AS VARCHAR), skipped_records FROM sluice_catalog.sources",
        labels: &["table", "topic", "partition"],
    },
    FromRows {
        name: "sluice_kafka_source_errors",
        help: "Errors a source met (broker down, topic gone, offsets reset), since start-up",
        sql: "SELECT table_name, topic, MAX(errors) FROM sluice_catalog.sources GROUP BY table_name, topic",
        labels: &["table", "topic"],
    },
    FromRows {
        name: "sluice_kafka_sink_records_sent",
        help: "Records a sink committed to its topic, since start-up",
        sql: "SELECT sink_name, topic, records_sent FROM sluice_catalog.sinks",
        labels: &["sink", "topic"],
    },
    FromRows {
        name: "sluice_kafka_sink_transactions",
        help: "Kafka transactions a sink committed, since start-up",
        sql: "SELECT sink_name, topic, transactions FROM sluice_catalog.sinks",
        labels: &["sink", "topic"],
    },
    FromRows {
        name: "sluice_kafka_sink_errors",
        help: "Errors a sink met (broker down, a transaction that failed), since start-up",
        sql: "SELECT sink_name, topic, errors FROM sluice_catalog.sinks",
        labels: &["sink", "topic"],
    },
    FromRows {
        name: "sluice_view_late_rows",
        help: "Rows each view refused as late since it was created",
        sql: "SELECT view_name, late_rows FROM sluice_catalog.views",
        labels: &["view"],
    },
    FromRows {
        name: "sluice_view_state_rows",
        help: "Rows (or groups) each view holds",
        sql: "SELECT view_name, state_rows FROM sluice_catalog.views",
        labels: &["view"],
    },
    FromRows {
        name: "sluice_view_checkpoint_age_seconds",
        help: "Seconds since each view's last committed checkpoint",
        sql: "SELECT view_name, checkpoint_age_seconds FROM sluice_catalog.views WHERE checkpoint_age_seconds IS NOT NULL",
        labels: &["view"],
    },
    FromRows {
        name: "sluice_view_compute_errors",
        help: "Times a view's rows did not compute from its state (a division by zero in its select list), since start-up; reads fail while sluice_catalog.views.compute_error says why",
        sql: "SELECT view_name, compute_errors FROM sluice_catalog.views",
        labels: &["view"],
    },
    FromRows {
        name: "sluice_view_failed",
        help: "1 when a view has stopped on an error (sluice_catalog.views.error)",
        sql: "SELECT view_name, CASE WHEN error IS NULL THEN 0 ELSE 1 END FROM sluice_catalog.views",
        labels: &["view"],
    },
];

/// The whole `/metrics` answer in Prometheus' text format.
pub async fn render(ctx: &SessionContext, connections_open: usize) -> Result<String, SluiceError> {
    let mut registry = Registry::default();
    METRICS.register(&mut registry);
    let open: Gauge<i64> = Gauge::default();
    open.set(connections_open as i64);
    registry.register(
        "sluice_connections_active",
        "Client connections open now",
        open,
    );
    if let Some(bytes) = resident_bytes() {
        let g: Gauge<i64> = Gauge::default();
        g.set(bytes as i64);
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the server process",
            g,
        );
    }
    for m in FROM_ROWS {
        let batches = ctx.sql(m.sql).await?.collect().await?;
        let family: Family<Labels, Gauge<f64, AtomicU64>> = Family::default();
        for batch in &batches {
            fill(&family, batch, m.labels)?;
        }
        registry.register(m.name, m.help, family);
    }
    let mut out = String::new();
    let text = |e: std::fmt::Error| SluiceError::Internal(format!("encoding metrics: {e}"));
    encode_registry(&mut out, &registry).map_err(text)?;
    encode_eof(&mut out).map_err(text)?;
    Ok(out)
}

fn fill(
    family: &Family<Labels, Gauge<f64, AtomicU64>>,
    batch: &RecordBatch,
    labels: &[&str],
) -> Result<(), SluiceError> {
    let label_columns = (0..labels.len())
        .map(|i| cast(batch.column(i), &DataType::Utf8))
        .collect::<Result<Vec<_>, _>>()?;
    let values = cast(batch.column(labels.len()), &DataType::Float64)?;
    let values = values.as_primitive::<arrow::datatypes::Float64Type>();
    for row in 0..batch.num_rows() {
        if values.is_null(row) {
            continue;
        }
        let set: Labels = labels
            .iter()
            .zip(&label_columns)
            .map(|(name, column)| {
                let column = column.as_string::<i32>();
                let value = match column.is_null(row) {
                    true => String::new(),
                    false => column.value(row).to_string(),
                };
                (name.to_string(), value)
            })
            .collect();
        family.get_or_create(&set).set(values.value(row));
    }
    Ok(())
}

/// Resident set size, from /proc (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_their_first_word() {
        assert_eq!(statement_kind("  SELECT 1"), "select");
        assert_eq!(statement_kind("(select 1)"), "select");
        assert_eq!(statement_kind("insert into t values (1)"), "insert");
        assert_eq!(statement_kind("GRANT x"), "other");
        assert_eq!(statement_kind(""), "other");
    }
}
