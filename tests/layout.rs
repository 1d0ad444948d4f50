//! The house rules of `src/`, checked on the source itself:
//! - only the wire (`src/server/`) and the login code (`src/auth/`) name
//!   pgwire; the layers below know no protocol;
//! - folders (and top-level modules) of `src/` import each other without
//!   a circle: each imports only those below it;
//! - `Engine::dispatch` only routes (under 100 lines).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The folder (or top-level module) a file of `src/` belongs to.
fn unit_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The source without its unit-test module, which may reach anywhere.
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    }
}

#[test]
fn only_the_wire_names_pgwire() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !["server", "auth"].contains(&unit_of(f).as_str()))
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("pgwire"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "pgwire named outside the wire: {offenders:#?}"
    );
}

#[test]
fn folders_import_without_a_circle() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let units: BTreeSet<String> = files.iter().map(|f| unit_of(f)).collect();
    // unit -> unit it imports -> a file that does
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in &files {
        let from = unit_of(f);
        if from == "lib" || from == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (at, _) in without_tests(&text).match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let to: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if to != from && units.contains(&to) {
                edges
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| f.display().to_string());
            }
        }
    }
    // A circle is a path back to where it started.
    fn path_back(
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        start: &str,
        at: &str,
        seen: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> bool {
        for next in edges.get(at).map(|m| m.keys()).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if path_back(edges, start, next, seen, path) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut circles = Vec::new();
    for unit in edges.keys() {
        let mut path = vec![unit.clone()];
        if path_back(&edges, unit, unit, &mut BTreeSet::new(), &mut path) {
            let hops: Vec<String> = path
                .windows(2)
                .map(|w| format!("{} -> {} ({})", w[0], w[1], edges[&w[0]][&w[1]]))
                .collect();
            circles.push(hops.join("; "));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles between folders: {circles:#?}"
    );
}

#[test]
fn dispatch_only_routes() {
    let text = std::fs::read_to_string(src().join("engine/mod.rs")).unwrap();
    let start = text
        .find("    async fn dispatch(")
        .expect("Engine::dispatch in src/engine/mod.rs");
    let end = text[start..]
        .find("\n    }\n")
        .expect("the end of Engine::dispatch");
    let lines = text[start..start + end].lines().count() + 1;
    assert!(lines < 100, "Engine::dispatch is {lines} lines");
}

/// A view's dataflow in layers: the operators know nothing of the view
/// they run in; a view as readers see it (`view.rs`) knows nothing of how
/// it is compiled or run; the compiler knows nothing of the runner.
#[test]
fn the_dataflow_is_in_layers() {
    let stream = src().join("stream");
    let layers: [(&str, Vec<PathBuf>, &[&str]); 3] = [
        (
            "operators",
            {
                let mut v = Vec::new();
                rust_files(&stream.join("operators"), &mut v);
                v
            },
            &[
                "stream::compile",
                "stream::view",
                "stream::runner",
                "super::super",
            ],
        ),
        (
            "view",
            ["view.rs", "changes.rs", "point_index.rs"]
                .iter()
                .map(|f| stream.join(f))
                .collect(),
            &["compile::", "runner::"],
        ),
        (
            "compile",
            {
                let mut v = Vec::new();
                rust_files(&stream.join("compile"), &mut v);
                v
            },
            &["runner::", "ViewManager"],
        ),
    ];
    let mut offenders = Vec::new();
    for (layer, files, above) in &layers {
        for f in files {
            let text = std::fs::read_to_string(f).unwrap();
            for line in without_tests(&text).lines() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                if let Some(name) = above.iter().find(|a| code.contains(*a)) {
                    offenders.push(format!("{layer}: {} names {name}", f.display()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a layer imports one above it: {offenders:#?}"
    );
}
