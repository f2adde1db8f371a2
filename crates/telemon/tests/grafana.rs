//! The Grafana dashboards of `deploy/grafana`, tested without a Grafana:
//!
//! - every `*.json` there parses as a dashboard model of schema version 36 or later, with a unique `uid`; every
//!   panel, those nested in collapsed rows included, has a title, a unit (`fieldConfig.defaults.unit`) and the
//!   data source `${datasource}`, as does each of its queries; rows have titles;
//! - each dashboard has the variables `datasource` (type `datasource`, query `prometheus`) and `target` (a
//!   `label_values(..., target)` query over `${datasource}`: `target` is the label that names a target on every
//!   series telemon exposes, docs/metrics.md);
//! - every metric name a query uses is a family of docs/metrics.md (a histogram's `_bucket`, `_sum` and `_count`
//!   included), found by a PromQL tokenizer that tells metric names from functions, keywords, aggregation
//!   operators, label names, strings and durations (and is tested on its own);
//! - the README names every dashboard file;
//! - against a real Prometheus 2.42 scraping `telemon serve` (in-process, over the five sims and two push
//!   senders, one with a disk queue, into a second Prometheus) every second: each `target` variable's query,
//!   asked as Grafana asks it (`/api/v1/label/target/values?match[]=...`), lists targets; and every query of
//!   every panel, with `$target` one of those targets and `$__rate_interval` 10 s (4 scrapes), evaluates without
//!   error to a non-empty result, using only metric names Prometheus has stored.
//!
//! Without `prometheus` (or `promtool`) on `PATH` the live test fails when `CI=true` (CI installs Debian's
//! package: `.ci/prometheus.sh`), and elsewhere prints `SKIPPED: ...` to stderr and passes. Its waits poll under
//! a safety net ([`DEADLINE`]) that fails the test with what was last seen; nothing asserts how long anything took.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use telemon::config::Config;

mod support;
use support::{http_get, urlencode, Receiver, SimOptions, Sims, DEADLINE};

/// What `$__rate_interval` becomes: Grafana's 4 scrape intervals, with Prometheus scraping every second here
/// (`rate()` needs two samples in the window).
const RATE_INTERVAL: &str = "10s";
/// What `$__range` becomes (the dashboards' time range).
const RANGE: &str = "1m";
/// The pause between two rounds of queries.
const POLL: Duration = Duration::from_millis(500);

/// The dashboard files, each with the protocol its `target` variable lists (`None`: every target).
const DASHBOARDS: [(&str, Option<&str>); 6] = [
    ("telemon-fleet.json", None),
    ("telemon-sys161.json", Some("meter161")),
    ("telemon-hmon.json", Some("hmon")),
    ("telemon-mono.json", Some("mono")),
    ("telemon-smon.json", Some("smon")),
    ("telemon-rvos.json", Some("sysinfo")),
];

// ---------------------------------------------------------------------------------------------------------------
// The dashboards

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One dashboard file, parsed.
struct Dashboard {
    file: String,
    json: Value,
}

/// Every `*.json` of `deploy/grafana`, sorted by name, parsed (a file that does not parse fails the test).
fn dashboards() -> Vec<Dashboard> {
    let dir = root().join("deploy/grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Dashboard { file: path.file_name().unwrap().to_string_lossy().into_owned(), json }
        })
        .collect()
}

/// A dashboard's panels, each row's nested panels (a collapsed row holds its own) after the row.
fn all_panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for p in panels.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(nested) = p.get("panels") {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Whether a panel is a row (a heading that holds no query).
fn is_row(panel: &Value) -> bool {
    panel["type"] == "row"
}

/// One query of one panel.
#[derive(Debug, Clone)]
struct Query {
    /// `FILE: PANEL TITLE [REF]`, for failures.
    at: String,
    expr: String,
}

/// Every query of every panel of `d`.
fn queries(d: &Dashboard) -> Vec<Query> {
    all_panels(&d.json)
        .into_iter()
        .filter(|p| !is_row(p))
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            p["targets"].as_array().cloned().unwrap_or_default().into_iter().map(move |t| Query {
                at: format!("{}: {title:?} [{}]", d.file, t["refId"].as_str().unwrap_or("?")),
                expr: t["expr"].as_str().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// A dashboard variable by name.
fn variable<'a>(d: &'a Dashboard, name: &str) -> &'a Value {
    d.json["templating"]["list"]
        .as_array()
        .and_then(|l| l.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("{}: no variable {name:?}", d.file))
}

/// The `target` variable's query: a string, or Grafana 10's `{"query": ...}`.
fn target_query(d: &Dashboard) -> String {
    let v = variable(d, "target");
    let q = &v["query"];
    q.as_str()
        .or_else(|| q["query"].as_str())
        .unwrap_or_else(|| panic!("{}: target query {q}", d.file))
        .to_owned()
}

/// `label_values(SELECTOR, LABEL)` split into its selector and label.
fn label_values(query: &str) -> Option<(String, String)> {
    let inner = query.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (selector, label) = inner.rsplit_once(',')?;
    Some((selector.trim().to_owned(), label.trim().to_owned()))
}

/// The data source reference every panel and query carries.
fn is_datasource_variable(v: &Value) -> bool {
    v["type"] == "prometheus" && v["uid"] == "${datasource}"
}

/// `expr` with the dashboard's variables replaced as Grafana would, `$target` by `target`.
fn substitute(expr: &str, target: &str) -> String {
    let mut out = expr.to_owned();
    for (name, value) in [("__rate_interval", RATE_INTERVAL), ("__range", RANGE), ("target", target)] {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("${name}"), value);
    }
    out
}

// ---------------------------------------------------------------------------------------------------------------
// Metric names in PromQL

/// One token of PromQL.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// A string literal (its text does not matter here).
    Str,
    /// A number or a duration.
    Num,
    Punct(char),
}

/// PromQL's tokens, or what could not be read (an unclosed string, a `$` left by a variable).
fn tokens(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unclosed string in {expr:?}")),
                    Some('\\') if c != '`' => i += 2,
                    Some(&d) if d == c => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            out.push(Token::Str);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            // Numbers (1, 0.5, 1e-3, 0x1f) and durations (10s, 1m30s).
            while i < chars.len() {
                let d = chars[i];
                let sign = (d == '-' || d == '+') && matches!(chars[i - 1], 'e' | 'E');
                if d.is_ascii_alphanumeric() || d == '.' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Token::Num);
        } else if c == '$' {
            return Err(format!("a variable is left in {expr:?}"));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    Ok(out)
}

/// PromQL's aggregation operators (they may be followed by `by (...)` instead of `(`).
const AGGREGATIONS: [&str; 13] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
];
/// Keywords that are followed by a list of label names in parentheses.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
/// The other keywords, and the literals that read like identifiers.
const KEYWORDS: [&str; 8] = ["and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"];

/// The metric names `expr` selects: identifiers that are not a function or an aggregation (followed by `(`),
/// not a keyword, not a label name (inside `{...}` or a `by (...)` list), not in a range (`[...]`).
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    /// What an open bracket is.
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Matchers,
        Range,
        LabelList,
        Group,
    }
    let tokens = tokens(expr)?;
    let mut names = BTreeSet::new();
    let mut open: Vec<Open> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let before = i.checked_sub(1).map(|b| &tokens[b]);
        let after = tokens.get(i + 1);
        match t {
            Token::Punct('{') => open.push(Open::Matchers),
            Token::Punct('[') => open.push(Open::Range),
            Token::Punct('(') => {
                let keyword = |k: &String| LABEL_LISTS.contains(&k.to_ascii_lowercase().as_str());
                let list = matches!(before, Some(Token::Ident(k)) if keyword(k));
                open.push(if list { Open::LabelList } else { Open::Group });
            }
            Token::Punct(c @ ('}' | ']' | ')')) => {
                let want = match c {
                    '}' => Open::Matchers,
                    ']' => Open::Range,
                    _ => Open::Group,
                };
                match open.pop() {
                    Some(o) if o == want || (want == Open::Group && o == Open::LabelList) => {}
                    _ => return Err(format!("unbalanced {c:?} in {expr:?}")),
                }
            }
            Token::Ident(id) => {
                let lower = id.to_ascii_lowercase();
                let inside = open.last().is_some_and(|o| *o != Open::Group);
                let call = after == Some(&Token::Punct('('));
                let word = AGGREGATIONS.contains(&lower.as_str())
                    || LABEL_LISTS.contains(&lower.as_str())
                    || KEYWORDS.contains(&lower.as_str());
                if id == "__name__" {
                    return Err(format!("{expr:?}: a selector by __name__ cannot be checked by name"));
                }
                if !(inside || call || word) {
                    names.insert(id.clone());
                }
            }
            _ => {}
        }
    }
    if !open.is_empty() {
        return Err(format!("unclosed bracket in {expr:?}"));
    }
    Ok(names)
}

/// The families docs/metrics.md documents, a histogram's `_bucket`, `_sum` and `_count` series with them: every
/// backquoted name with a protocol's or telemon's prefix.
fn documented() -> BTreeSet<String> {
    const PREFIXES: [&str; 6] = ["telemon_", "sys161_", "dyalog_", "mono_", "smon_", "rvos_"];
    let path = root().join("docs/metrics.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let histogram = line.contains("| histogram |") || line.contains("real histograms");
        for quoted in line.split('`').skip(1).step_by(2) {
            let name: String =
                quoted.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            if PREFIXES.iter().any(|p| name.starts_with(p)) {
                if histogram {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                names.insert(name);
            }
        }
    }
    names
}

// ---------------------------------------------------------------------------------------------------------------
// The static tests

#[test]
fn the_dashboards_are_the_six_of_the_readme() {
    let found: Vec<String> = dashboards().into_iter().map(|d| d.file).collect();
    let mut want: Vec<String> = DASHBOARDS.iter().map(|(f, _)| f.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
    let readme = std::fs::read_to_string(root().join("deploy/grafana/README.md")).unwrap();
    for (file, _) in DASHBOARDS {
        assert!(readme.contains(file), "deploy/grafana/README.md does not name {file}");
    }
}

#[test]
fn every_panel_has_a_title_a_unit_and_the_data_source() {
    let mut uids = BTreeSet::new();
    for d in dashboards() {
        let f = &d.file;
        let schema = d.json["schemaVersion"].as_u64().unwrap_or(0);
        assert!(schema >= 36, "{f}: schemaVersion {schema} (Grafana 10 wants 36 or later)");
        assert!(d.json["title"].as_str().is_some_and(|t| !t.is_empty()), "{f}: no title");
        let uid = d.json["uid"].as_str().unwrap_or_default().to_owned();
        assert!(!uid.is_empty() && uid.len() <= 40, "{f}: uid {uid:?} (1 to 40 characters)");
        assert!(uids.insert(uid.clone()), "{f}: uid {uid:?} is another dashboard's");
        let panels = all_panels(&d.json);
        assert!(panels.iter().filter(|p| !is_row(p)).count() >= 5, "{f}: too few panels");
        let mut ids = BTreeSet::new();
        for p in panels {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(!title.trim().is_empty(), "{f}: a panel without a title: {p}");
            let id = p["id"].as_u64().unwrap_or_else(|| panic!("{f}: {title:?} has no id"));
            assert!(ids.insert(id), "{f}: {title:?} has the id {id} of another panel");
            for k in ["h", "w", "x", "y"] {
                assert!(p["gridPos"][k].is_u64(), "{f}: {title:?} has no gridPos.{k}");
            }
            if is_row(p) {
                assert!(p.get("targets").is_none(), "{f}: row {title:?} has queries");
                continue;
            }
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or_default();
            assert!(!unit.is_empty(), "{f}: {title:?} has no fieldConfig.defaults.unit");
            assert!(
                is_datasource_variable(&p["datasource"]),
                "{f}: {title:?} data source {}",
                p["datasource"]
            );
            let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{f}: {title:?} has no targets"));
            assert!(!targets.is_empty(), "{f}: {title:?} has no query");
            let mut refs = BTreeSet::new();
            for t in targets {
                let r = t["refId"].as_str().unwrap_or_default();
                assert!(!r.is_empty() && refs.insert(r), "{f}: {title:?} refId {r:?}");
                assert!(is_datasource_variable(&t["datasource"]), "{f}: {title:?} [{r}] data source");
                assert!(
                    t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                    "{f}: {title:?} [{r}] has no expr"
                );
            }
        }
    }
}

#[test]
fn every_dashboard_has_the_datasource_and_target_variables() {
    for d in dashboards() {
        let f = &d.file;
        let ds = variable(&d, "datasource");
        assert_eq!(ds["type"], "datasource", "{f}: {ds}");
        assert_eq!(ds["query"], "prometheus", "{f}: {ds}");
        let target = variable(&d, "target");
        assert_eq!(target["type"], "query", "{f}: {target}");
        assert!(is_datasource_variable(&target["datasource"]), "{f}: {target}");
        let query = target_query(&d);
        let (selector, label) =
            label_values(&query).unwrap_or_else(|| panic!("{f}: {query:?} is not label_values(..., ...)"));
        assert_eq!(label, "target", "{f}: {query:?}");
        let names = metric_names(&selector).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(names, BTreeSet::from(["telemon_target_up".to_owned()]), "{f}: {query:?}");
        let protocol = DASHBOARDS.iter().find(|(file, _)| *file == f.as_str()).and_then(|(_, p)| *p);
        match protocol {
            Some(p) => {
                assert!(selector.contains(&format!("protocol=\"{p}\"")), "{f}: {query:?} lists not {p}")
            }
            None => assert!(!selector.contains("protocol"), "{f}: {query:?} lists not every target"),
        }
        // Every query of a protocol's dashboard is about the chosen targets, except its variable.
        if protocol.is_some() {
            for q in queries(&d) {
                assert!(q.expr.contains("target=~\"$target\""), "{}: {} ignores $target", q.at, q.expr);
            }
        }
    }
}

#[test]
fn every_metric_a_panel_queries_is_in_metrics_md() {
    let documented = documented();
    // The parse of metrics.md is not empty-handed: a family of each kind of section is in it.
    for name in [
        "telemon_target_up",
        "telemon_sender_request_duration_seconds_bucket",
        "sys161_user_instructions_total",
        "dyalog_threads",
        "mono_runtime_bytes",
        "smon_value",
        "rvos_ipc_latency_seconds_count",
    ] {
        assert!(documented.contains(name), "{name} not found in docs/metrics.md: {documented:?}");
    }
    let mut used = BTreeSet::new();
    for d in dashboards() {
        for q in queries(&d) {
            let names = metric_names(&substitute(&q.expr, "t")).unwrap_or_else(|e| panic!("{}: {e}", q.at));
            assert!(!names.is_empty(), "{}: no metric name in {}", q.at, q.expr);
            for n in &names {
                assert!(documented.contains(n), "{}: {n} is not in docs/metrics.md ({})", q.at, q.expr);
            }
            used.extend(names);
        }
    }
    eprintln!("the dashboards use {} of the {} documented names", used.len(), documented.len());
}

#[test]
fn the_tokenizer_tells_metric_names_from_the_rest() {
    let names = |e: &str| metric_names(e).unwrap_or_else(|err| panic!("{err}"));
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(names("up"), set(&["up"]));
    assert_eq!(
        names(r#"sum by (target, kind) (rate(telemon_target_errors_total{target=~"a|b", kind!="x"}[5m]))"#),
        set(&["telemon_target_errors_total"])
    );
    assert_eq!(
        names(r#"sum(rate(a_total[1m30s] offset 5m)) without (le) / on (job) group_left (instance) b_info"#),
        set(&["a_total", "b_info"])
    );
    assert_eq!(
        names(r#"histogram_quantile(0.99, sum by (le) (rate(x_bucket{le!="+Inf"}[10s])))"#),
        set(&["x_bucket"])
    );
    assert_eq!(
        names(r#"smon_value{name="a"} - ignoring(name) smon_value{name="b"} and bool_x > bool 0"#),
        set(&["smon_value", "bool_x"])
    );
    assert_eq!(names(r#"label_replace(m, "dst", "$1", "src", "(.*)") # a comment sum"#), set(&["m"]));
    assert_eq!(names("time() - last_seconds > 1e-3 or vector(Inf)"), set(&["last_seconds"]));
    assert_eq!(names("count by (target) (rvos_process_state) / 2"), set(&["rvos_process_state"]));
    assert_eq!(names("max_over_time(x[5m:30s])"), set(&["x"]));
    assert!(metric_names(r#"{__name__=~"mono_.*"}"#).is_err(), "a selector by __name__ is refused");
    assert!(metric_names("rate(x[$__rate_interval])").is_err(), "a variable left is refused");
    assert!(metric_names("sum(x").is_err(), "an unclosed bracket is refused");
    assert!(metric_names(r#"x{a="b}"#).is_err(), "an unclosed string is refused");
    assert_eq!(
        substitute(r#"rate(x{target=~"$target"}[$__rate_interval]) * ${__range}"#, "sys161"),
        r#"rate(x{target=~"sys161"}[10s]) * 1m"#
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Against a real Prometheus

/// `GET path` of Prometheus's API: the `data` of a `success`, or what went wrong (an error's `errorType` and
/// `error`, as Prometheus reports bad PromQL).
async fn api(prometheus: SocketAddr, path: &str) -> Result<Value, String> {
    let (status, body) = http_get(prometheus, path, &[]).await.map_err(|e| format!("GET {path}: {e}"))?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("GET {path}: {status} {body:?}: {e}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("GET {path}: {status} {} {}", v["errorType"], v["error"]));
    }
    Ok(v["data"].clone())
}

/// Prometheus's scrape config: `/metrics` of telemon every second.
fn prometheus_yml(telemon: SocketAddr) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\nscrape_configs:\n  \
         - job_name: telemon\n    static_configs:\n      - targets: [\"{telemon}\"]\n"
    )
}

/// The Mono agent's counters: counts, bytes and times, the System CPU times among them.
const MONO_COUNTERS: &str = "Mono JIT/Compiled methods;Mono GC/Minor GC collections;Mono System/Working Set;\
                             Mono System/Private Bytes;Mono System/User Time;Mono System/System Time";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_data_from_prometheus_scraping_the_five_sims() {
    let test = "every_panel_query_returns_data_from_prometheus_scraping_the_five_sims";
    let Some((prometheus_bin, _)) = support::prometheus_and_promtool(test) else { return };
    let started = Instant::now();
    // smon with the host's own /proc figures (CPU, memory, load), which the dashboards' headline figures use.
    let options = SimOptions {
        smon_source: || -> Box<dyn smon_sim::Source> { Box::new(smon_sim::ProcSource::new("/proc", "/sys")) },
        smon_interval: Duration::from_millis(250),
        mono_counters: MONO_COUNTERS,
        ..SimOptions::steady()
    };
    let sims = Sims::start(options).await;
    // Two push senders into a second Prometheus (so the scraped one sees each series once): one in memory,
    // one with a disk queue, so that every telemon_sender_* family exists.
    let receiver = Receiver::prometheus(&prometheus_bin).await;
    let queue = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}\n[[remote_write]]\nname = \"memory\"\nurl = \"{url}\"\nbatch = \"500ms\"\n\n[[remote_write]]\n\
         name = \"disk\"\nurl = \"{url}\"\nbatch = \"500ms\"\nqueue_dir = '{}'\n",
        sims.toml(Some("250ms")),
        queue.path().display(),
        url = receiver.write_url(),
    );
    let config = Config::parse("grafana-e2e.toml", &toml).unwrap_or_else(|e| panic!("{e}"));
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("telemon serve starts");
    sims.start_mono_agent();
    let prometheus =
        support::Prometheus::new(&prometheus_bin).config(prometheus_yml(server.local_addr())).start().await;
    let prom = prometheus.addr();

    // Each dashboard's target variable, asked as Grafana asks it; its first target stands for `$target`.
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for d in dashboards() {
        let (selector, label) = label_values(&target_query(&d)).expect("label_values");
        let path = format!("/api/v1/label/{label}/values?match[]={}", urlencode(&selector));
        let protocol = DASHBOARDS.iter().find(|(f, _)| *f == d.file).and_then(|(_, p)| *p);
        let targets: Vec<String> =
            support::until(&format!("{}: {selector} lists targets", d.file), POLL, async || {
                let data = api(prom, &path).await.ok()?;
                let values: Vec<String> =
                    data.as_array()?.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
                // The fleet's list has all five protocols' targets once each is up.
                let enough = if protocol.is_some() { !values.is_empty() } else { values.len() >= 5 };
                enough.then_some(values)
            })
            .await;
        match protocol {
            Some("mono") => assert!(targets.iter().all(|t| t.starts_with("mono/127.0.0.1:")), "{targets:?}"),
            Some("meter161") => assert_eq!(targets, ["sys161"]),
            Some("hmon") => assert_eq!(targets, ["dyalog"]),
            Some("sysinfo") => assert_eq!(targets, ["rvos"]),
            Some(p) => assert_eq!(targets, [p]),
            None => {}
        }
        chosen.insert(d.file.clone(), targets[0].clone());
    }

    // Every query, until each has answered with data; a query Prometheus refuses fails at once.
    let documented = documented();
    let mut pending: Vec<(Query, String)> = dashboards()
        .iter()
        .flat_map(|d| {
            let target = chosen[&d.file].clone();
            queries(d).into_iter().map(move |q| {
                let expr = substitute(&q.expr, &target);
                (q, expr)
            })
        })
        .collect();
    let total = pending.len();
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    let waited = tokio::time::timeout(DEADLINE, async {
        while !pending.is_empty() {
            let mut still = Vec::new();
            for (q, expr) in pending.drain(..) {
                let path = format!("/api/v1/query?query={}", urlencode(&expr));
                match api(prom, &path).await {
                    Ok(data) if data["result"].as_array().is_some_and(|r| !r.is_empty()) => {}
                    Ok(data) => {
                        last.insert(q.at.clone(), format!("{expr}\n  answer: {data}"));
                        still.push((q, expr));
                    }
                    Err(e) => panic!("{}: Prometheus refuses {expr}: {e}", q.at),
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(POLL).await;
            }
        }
    })
    .await;
    if waited.is_err() {
        let left: Vec<String> = pending.iter().map(|(q, _)| format!("{}: {}", q.at, last[&q.at])).collect();
        panic!(
            "{} of {total} queries had no data within {DEADLINE:?}:\n{}\n{}",
            left.len(),
            left.join("\n"),
            prometheus.log_tail()
        );
    }

    // Every metric name the tokenizer found is one Prometheus stored, and none it stored is undocumented.
    let stored: BTreeSet<String> = api(prom, "/api/v1/label/__name__/values")
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    for d in dashboards() {
        for q in queries(&d) {
            for name in metric_names(&substitute(&q.expr, "t")).unwrap() {
                assert!(
                    stored.contains(&name),
                    "{}: {name} is not among Prometheus's names {stored:?}",
                    q.at
                );
                assert!(documented.contains(&name), "{}: {name}", q.at);
            }
        }
    }
    eprintln!(
        "{total} queries of {} dashboards answered with data, {:.1} s after the start",
        DASHBOARDS.len(),
        started.elapsed().as_secs_f64()
    );

    prometheus.kill().await;
    receiver.component.kill().await;
    server.shutdown().await;
    sims.stop().await;
}
