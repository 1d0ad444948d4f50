//! The status page (`/` of the HTTP endpoint): one server-rendered HTML
//! page of what the `sluice_catalog` tables say now: tables and
//! partitions, views, subscriptions, recent checkpoints and sessions.
//!
//! Each section is a SQL query over those tables, shown under the section
//! so that the same answer can be had from psql. No build step and no
//! external assets: the page carries its own style and a small script
//! that fetches the sections again every few seconds (`/?part=main`).
//! Without the script a `<noscript>` refresh reloads the whole page.

use std::fmt::Write;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;

/// One section of the page: a heading and the query that fills it.
struct Section {
    id: &'static str,
    title: &'static str,
    sql: &'static str,
}

const SECTIONS: &[Section] = &[
    Section {
        id: "tables",
        title: "Tables",
        sql: "SELECT t.table_name, t.partitions, SUM(p.end_offset) AS records, \
              SUM(p.bytes) AS local_bytes, SUM(p.remote_bytes) AS remote_bytes, \
              t.ingested_bytes, t.statements, t.commits \
              FROM sluice_catalog.tables t JOIN sluice_catalog.partitions p USING (table_name) \
              GROUP BY t.table_name, t.partitions, t.ingested_bytes, t.statements, t.commits \
              ORDER BY t.table_name",
    },
    Section {
        id: "partitions",
        title: "Partitions",
        sql: "SELECT p.table_name, p.partition, p.start_offset, p.end_offset, p.bytes, \
              p.segments, p.remote_segments, p.remote_bytes, w.watermark, w.idle, \
              p.compactions, p.compaction_progress \
              FROM sluice_catalog.partitions p LEFT JOIN sluice_catalog.watermarks w \
              ON p.table_name = w.table_name AND p.partition = w.partition \
              ORDER BY p.table_name, p.partition",
    },
    Section {
        id: "views",
        title: "Materialized views",
        sql: "SELECT v.view_name, v.source_table, v.lag_rows, f.freshness_seconds, \
              v.state_rows, o.state_bytes, v.late_rows, v.watermark, v.backfill, \
              v.backfill_done_rows, v.backfill_total_rows, v.checkpoint_age_seconds, v.error \
              FROM sluice_catalog.views v \
              LEFT JOIN (SELECT consumer, MAX(lag_seconds) AS freshness_seconds \
                         FROM sluice_catalog.lag WHERE kind = 'view' GROUP BY consumer) f \
              ON f.consumer = v.view_name \
              LEFT JOIN (SELECT view_name, SUM(state_bytes) AS state_bytes \
                         FROM sluice_catalog.view_operators GROUP BY view_name) o \
              ON o.view_name = v.view_name \
              ORDER BY v.view_name",
    },
    Section {
        id: "subscriptions",
        title: "Subscriptions",
        sql: "SELECT consumer AS subscription, source, SUM(lag_records) AS lag_records, \
              MAX(lag_seconds) AS lag_seconds, SUM(skipped_records) AS skipped_records \
              FROM sluice_catalog.lag WHERE kind = 'subscription' \
              GROUP BY consumer, source ORDER BY consumer, source",
    },
    Section {
        id: "checkpoints",
        title: "Recent checkpoints",
        sql: "SELECT view_name, epoch, attempt, started, duration_ms, bytes, error \
              FROM sluice_catalog.checkpoints ORDER BY started DESC LIMIT 20",
    },
    Section {
        id: "sessions",
        title: "Sessions",
        sql: "SELECT pid, user_name, database, application_name, client_addr, state, \
              query_start, query FROM sluice_catalog.sessions ORDER BY pid",
    },
];

/// Seconds between refreshes.
const REFRESH_SECONDS: u32 = 5;

/// The whole page.
pub async fn page(ctx: &SessionContext) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sluice status</title>
<noscript><meta http-equiv="refresh" content="{REFRESH_SECONDS}"></noscript>
<style>{STYLE}</style>
</head>
<body>
<header><h1>Sluice {version}</h1><span id="state">refreshes every {REFRESH_SECONDS} s</span>
<nav>{nav}</nav></header>
<div id="errors"></div>
<main id="main">
"#,
        version = env!("CARGO_PKG_VERSION"),
        nav = SECTIONS
            .iter()
            .map(|s| format!(r##"<a href="#{}">{}</a>"##, s.id, s.title))
            .collect::<Vec<_>>()
            .join(" "),
    );
    out.push_str(&main(ctx).await);
    let _ = write!(
        out,
        "</main>\n<script>{}</script>\n</body>\n</html>\n",
        SCRIPT.replace("REFRESH_MS", &(REFRESH_SECONDS * 1000).to_string())
    );
    out
}

/// The sections alone, as the page's script fetches them.
pub async fn main(ctx: &SessionContext) -> String {
    let mut out = String::new();
    for s in SECTIONS {
        let _ = write!(out, r#"<section id="{}"><h2>{}</h2>"#, s.id, s.title);
        match rows(ctx, s.sql).await {
            Ok(batches) => out.push_str(&table(&batches)),
            Err(e) => {
                let _ = write!(out, r#"<p class="error">{}</p>"#, escape(&e));
            }
        }
        let _ = writeln!(
            out,
            "<details><summary>as SQL</summary><pre>{}</pre></details></section>",
            escape(&s.sql.split_whitespace().collect::<Vec<_>>().join(" "))
        );
    }
    out
}

async fn rows(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let frame = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    frame.collect().await.map_err(|e| e.to_string())
}

/// A query's rows as an HTML table; "none" when there are none.
fn table(batches: &[RecordBatch]) -> String {
    let Some(first) = batches.first() else {
        return "<p class=\"none\">none</p>".into();
    };
    if batches.iter().all(|b| b.num_rows() == 0) {
        return "<p class=\"none\">none</p>".into();
    }
    let schema = first.schema();
    let mut out = String::from("<table><thead><tr>");
    for f in schema.fields() {
        let _ = write!(out, "<th>{}</th>", escape(f.name()));
    }
    out.push_str("</tr></thead><tbody>");
    let options = FormatOptions::default().with_null("");
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect();
        for row in 0..batch.num_rows() {
            out.push_str("<tr>");
            for (i, f) in schema.fields().iter().enumerate() {
                let text = match &formatters[i] {
                    Ok(fmt) => fmt.value(row).to_string(),
                    Err(e) => e.to_string(),
                };
                out.push_str(&cell(f.name(), f.data_type(), &text));
            }
            out.push_str("</tr>");
        }
    }
    out.push_str("</tbody></table>");
    out
}

/// One cell: sizes in KiB/MiB/GiB (exact in the title), numbers to the
/// right, errors marked.
fn cell(column: &str, data_type: &DataType, text: &str) -> String {
    if text.is_empty() {
        return "<td></td>".into();
    }
    if column.ends_with("bytes") {
        if let Ok(n) = text.parse::<u64>() {
            return format!(r#"<td class="n" title="{n} bytes">{}</td>"#, size(n));
        }
    }
    if data_type.is_floating() {
        if let Ok(x) = text.parse::<f64>() {
            return format!(r#"<td class="n">{x:.3}</td>"#);
        }
    }
    if data_type.is_integer() {
        return format!(r#"<td class="n">{}</td>"#, escape(text));
    }
    let class = match column {
        "error" => " class=\"error\"",
        "query" => " class=\"query\"",
        _ => "",
    };
    format!("<td{class}>{}</td>", escape(text))
}

fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:0 1.5em 2em;color:#222}\
header{position:sticky;top:0;background:#fff;padding:.6em 0;border-bottom:1px solid #ddd}\
h1{font-size:1.3em;display:inline;margin-right:1em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
nav{margin-top:.3em}nav a{margin-right:.8em}#state{color:#666}\
table{border-collapse:collapse}th,td{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left}\
th{background:#f4f4f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}\
td.query{font-family:monospace;max-width:40em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}\
.error{color:#b00}.none{color:#888}details{color:#666;margin-top:.3em}pre{white-space:pre-wrap}";

/// Fetches the sections again every REFRESH_MS and swaps them in; says
/// when the server cannot be reached. Marks the body when it has run (and
/// each time it refreshed), and lists script errors, for the test that
/// renders the page in a browser.
const SCRIPT: &str = r#"(function () {
  var body = document.body;
  var state = document.getElementById('state');
  window.addEventListener('error', function (e) {
    body.dataset.errors = (body.dataset.errors || '') + e.message + ';';
    document.getElementById('errors').textContent = 'script error: ' + e.message;
  });
  var refreshes = 0;
  function refresh() {
    fetch('/?part=main', { cache: 'no-store' })
      .then(function (r) {
        if (!r.ok) { throw new Error('HTTP ' + r.status); }
        return r.text();
      })
      .then(function (html) {
        document.getElementById('main').innerHTML = html;
        refreshes += 1;
        body.dataset.refreshes = String(refreshes);
        state.textContent = 'updated ' + new Date().toLocaleTimeString();
      })
      .catch(function (e) {
        state.textContent = 'server not reachable (' + e.message + '), retrying';
      });
  }
  setInterval(refresh, REFRESH_MS);
  body.dataset.script = 'ready';
})();"#;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn cells_are_escaped_and_sizes_read_as_sizes() {
        assert_eq!(escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 * 1024 * 1024 / 2), "1.5 MiB");
        let batch = RecordBatch::try_from_iter(vec![
            (
                "view_name",
                Arc::new(StringArray::from(vec!["<v>"])) as arrow::array::ArrayRef,
            ),
            ("state_bytes", Arc::new(Int64Array::from(vec![2048]))),
        ])
        .unwrap();
        let html = table(&[batch]);
        assert!(html.contains("<td>&lt;v&gt;</td>"), "{html}");
        assert!(
            html.contains(r#"<td class="n" title="2048 bytes">2.0 KiB</td>"#),
            "{html}"
        );
        assert_eq!(table(&[]), "<p class=\"none\">none</p>");
    }
}
