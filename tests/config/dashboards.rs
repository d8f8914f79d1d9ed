//! `docs/grafana/ratelimit-dashboard.json` and
//! `docs/prometheus/ratelimit-alerts.yml` against the metrics catalogue
//! (`ratelimit::metrics::CATALOGUE`): every PromQL expression is parsed (by
//! `promql-parser`, not by a regex) and its AST walked, so that each metric it
//! selects is one the library exports (a histogram's `_bucket`, `_sum` or
//! `_count` series included), each label it matches or groups by is one the
//! metric has (or Prometheus' own `instance`, `job`, `le`), and each value it
//! matches a fixed-value label against (`decision`, `result`, `reason`) is
//! one the library records. The dashboard must chart every metric of the
//! catalogue (but those in [`LEFT_OUT`]), and the alerts the operations
//! guide names must exist, with a `for:` and the annotations an on-call
//! reader needs.
//!
//! `cargo test --test config dashboards`

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr, LabelModifier, VectorSelector};
use ratelimit::metrics::{find, Kind, Metric, CATALOGUE};
use serde::Deserialize;
use serde_json::Value;

/// Catalogue metrics the dashboard leaves out on purpose, with why. Empty:
/// every metric the library exports has a panel.
const LEFT_OUT: &[(&str, &str)] = &[];

/// Labels every scraped series has, or that a histogram's buckets have.
const SCRAPE_LABELS: &[&str] = &["instance", "job"];

/// The alerts `docs/operations.md` promises: name, the `for:` it must have
/// (`None`: any), and the metrics its expression must read.
const REQUIRED_ALERTS: &[(&str, Option<&str>, &[&str])] = &[
    ("RateLimitFleetLimitOff", Some("1m"), &["ratelimit_global_degraded"]),
    (
        "RateLimitStoreAtCapacity",
        Some("5m"),
        &[
            "ratelimit_store_keys",
            "ratelimit_store_max_keys",
            "ratelimit_store_overflow_total",
        ],
    ),
    ("RateLimitHighRejectionRatio", None, &["ratelimit_decisions_total"]),
    ("RateLimitJwksFailing", None, &["ratelimit_jwks_fetches_total"]),
    (
        "RateLimitFleetSyncTaskStopped",
        None,
        &["ratelimit_global_degraded_reason"],
    ),
    ("RateLimitServiceErrors", None, &["ratelimit_service_requests_total"]),
];

fn docs(path: &str) -> (PathBuf, String) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs").join(path);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p, text)
}

// ---------------------------------------------------------------------------
// The checker: one PromQL expression against the catalogue.

/// What one expression selects: the catalogue metrics (by family name) and
/// every problem found.
#[derive(Debug, Default)]
struct Checked {
    metrics: BTreeSet<&'static str>,
    errors: Vec<String>,
}

/// A selector's series resolved to its catalogue metric: a histogram's
/// `_bucket`, `_sum` and `_count` resolve to the histogram.
fn resolve(series: &str) -> Result<(&'static Metric, bool), String> {
    if let Some(m) = find(series) {
        if m.kind == Kind::Histogram {
            return Err(format!(
                "`{series}` is a histogram: select its `_bucket`, `_sum` or `_count` series"
            ));
        }
        return Ok((m, false));
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = series.strip_suffix(suffix) {
            match find(base) {
                Some(m) if m.kind == Kind::Histogram => return Ok((m, suffix == "_bucket")),
                Some(m) => {
                    return Err(format!(
                        "`{series}`: `{}` is a {:?}, not a histogram (no `{suffix}` series)",
                        m.name, m.kind
                    ))
                }
                None => {}
            }
        }
    }
    Err(format!("`{series}` is not in ratelimit::metrics::CATALOGUE"))
}

/// Labels a series of `m` can carry.
fn has_label(m: &Metric, bucket: bool, label: &str) -> bool {
    SCRAPE_LABELS.contains(&label) || (bucket && label == "le") || m.labels.iter().any(|(l, _)| *l == label)
}

/// The values `label` of `m` can take, when it has a fixed set.
fn fixed_values(m: &Metric, label: &str) -> Option<&'static [&'static str]> {
    m.labels
        .iter()
        .find(|(l, _)| *l == label)
        .map(|(_, v)| *v)
        .filter(|v| !v.is_empty())
}

/// Every vector selector of `e` (matrix selectors' included) and every label
/// named by `by`, `without`, `on`, `ignoring`, `group_left` or `group_right`.
fn walk<'e>(e: &'e Expr, selectors: &mut Vec<&'e VectorSelector>, grouping: &mut Vec<String>) {
    fn modifier(m: &LabelModifier, grouping: &mut Vec<String>) {
        let (LabelModifier::Include(l) | LabelModifier::Exclude(l)) = m;
        grouping.extend(l.labels.iter().cloned());
    }
    match e {
        Expr::Aggregate(a) => {
            if let Some(m) = &a.modifier {
                modifier(m, grouping);
            }
            if let Some(p) = &a.param {
                walk(p, selectors, grouping);
            }
            walk(&a.expr, selectors, grouping);
        }
        Expr::Unary(u) => walk(&u.expr, selectors, grouping),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier {
                if let Some(on) = &m.matching {
                    modifier(on, grouping);
                }
                if let Some(l) = m.card.labels() {
                    grouping.extend(l.labels.iter().cloned());
                }
            }
            walk(&b.lhs, selectors, grouping);
            walk(&b.rhs, selectors, grouping);
        }
        Expr::Paren(p) => walk(&p.expr, selectors, grouping),
        Expr::Subquery(s) => walk(&s.expr, selectors, grouping),
        Expr::VectorSelector(vs) => selectors.push(vs),
        Expr::MatrixSelector(ms) => selectors.push(&ms.vs),
        Expr::Call(c) => {
            for a in &c.args.args {
                walk(a, selectors, grouping);
            }
        }
        _ => {}
    }
}

/// One matcher of a selector of `m`: its label exists, and a fixed-value
/// label is matched against values the library records.
fn check_matcher(m: &Metric, bucket: bool, mt: &Matcher) -> Result<(), String> {
    if !has_label(m, bucket, &mt.name) {
        let labels: Vec<_> = m.labels.iter().map(|(l, _)| *l).collect();
        return Err(format!(
            "`{}` has no label `{}` (its labels: {labels:?}, plus {SCRAPE_LABELS:?}{})",
            m.name,
            mt.name,
            if bucket { " and le" } else { "" }
        ));
    }
    let Some(values) = fixed_values(m, &mt.name) else {
        return Ok(());
    };
    let bad = |what: &str| {
        Err(format!(
            "`{}{{{}{}\"{}\"}}` {what}: `{}` takes only {values:?}",
            m.name, mt.name, mt.op, mt.value, mt.name
        ))
    };
    let selected = values.iter().filter(|v| mt.is_match(v)).count();
    match &mt.op {
        MatchOp::Equal | MatchOp::NotEqual => {
            if !values.contains(&mt.value.as_str()) {
                return bad("names a value the library never records");
            }
            Ok(())
        }
        MatchOp::Re(_) | MatchOp::NotRe(_) => {
            // A plain alternation (`error|timeout`): each part is a value.
            let plain = mt
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|');
            if plain && mt.value.split('|').any(|v| !values.contains(&v)) {
                return bad("names a value the library never records");
            }
            if selected == 0 {
                return bad("selects none of the values the library records");
            }
            if matches!(mt.op, MatchOp::NotRe(_)) && selected == values.len() {
                return bad("excludes none of the values the library records");
            }
            Ok(())
        }
    }
}

/// Parses `expr` and checks it against the catalogue.
fn check(expr: &str) -> Checked {
    let mut out = Checked::default();
    let ast = match parser::parse(expr) {
        Ok(ast) => ast,
        Err(e) => {
            out.errors.push(format!("does not parse as PromQL: {e}"));
            return out;
        }
    };
    let (mut selectors, mut grouping) = (Vec::new(), Vec::new());
    walk(&ast, &mut selectors, &mut grouping);
    if selectors.is_empty() {
        out.errors.push("selects no metric".to_owned());
    }
    let mut labels_in_scope: BTreeSet<&str> = SCRAPE_LABELS.iter().copied().collect();
    for vs in selectors {
        let name_matcher = vs
            .matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && m.op == MatchOp::Equal);
        let Some(series) = vs.name.as_deref().or(name_matcher.map(|m| m.value.as_str())) else {
            out.errors.push(format!("`{vs}` names no metric"));
            continue;
        };
        if !series.starts_with("ratelimit_") {
            out.errors.push(format!("`{series}` is not a ratelimit metric"));
            continue;
        }
        let (metric, bucket) = match resolve(series) {
            Ok(r) => r,
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        out.metrics.insert(metric.name);
        labels_in_scope.extend(metric.labels.iter().map(|(l, _)| *l));
        if bucket {
            labels_in_scope.insert("le");
        }
        let all = vs
            .matchers
            .matchers
            .iter()
            .chain(vs.matchers.or_matchers.iter().flatten());
        for mt in all.filter(|m| m.name != "__name__") {
            if let Err(e) = check_matcher(metric, bucket, mt) {
                out.errors.push(e);
            }
        }
    }
    for l in grouping {
        if !labels_in_scope.contains(l.as_str()) {
            out.errors.push(format!(
                "groups or matches on `{l}`, a label none of its metrics has (in scope: {labels_in_scope:?})"
            ));
        }
    }
    out
}

/// Panics with every problem, each with where it is and the expression.
fn fail_loudly(file: &str, problems: &[String]) {
    if !problems.is_empty() {
        panic!("{file}: {} problem(s):\n\n{}\n", problems.len(), problems.join("\n\n"));
    }
}

fn report(problems: &mut Vec<String>, place: &str, expr: &str, checked: &Checked) {
    for e in &checked.errors {
        problems.push(format!("{place}: {e}\n    expr: {expr}"));
    }
}

#[test]
fn the_checker_catches_mistakes() {
    let ok = check(
        r#"sum by (route) (rate(ratelimit_decisions_total{decision="rejected", job="x"}[5m]))
           / on (route) group_left sum by (route) (rate(ratelimit_decisions_total[5m]))"#,
    );
    assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    let ok = check("histogram_quantile(0.9, sum by (le) (rate(ratelimit_retry_after_seconds_bucket[5m])))");
    assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    assert_eq!(
        ok.metrics.iter().copied().collect::<Vec<_>>(),
        ["ratelimit_retry_after_seconds"]
    );

    for (bad, says) in [
        (
            "rate(ratelimit_decision_total[5m])",
            "not in ratelimit::metrics::CATALOGUE",
        ),
        (r#"ratelimit_decisions_total{decision="refused"}"#, "never records"),
        (r#"ratelimit_decisions_total{decision!="refused"}"#, "never records"),
        (
            r#"ratelimit_decisions_total{decision=~"allowed|refused"}"#,
            "never records",
        ),
        (r#"ratelimit_decisions_total{decision=~"ref.*"}"#, "selects none"),
        (r#"ratelimit_decisions_total{decision!~".*"}"#, "selects none"),
        (r#"ratelimit_decisions_total{decision!~"x.*"}"#, "excludes none"),
        (r#"ratelimit_decisions_total{decision!~"refused"}"#, "never records"),
        (
            r#"ratelimit_global_sync_rounds_total{result="timeout"}"#,
            "never records",
        ),
        (r#"ratelimit_store_keys{route="a"}"#, "has no label `route`"),
        (r#"ratelimit_decisions_total{le="1"}"#, "has no label `le`"),
        (
            "sum by (reason) (ratelimit_store_keys)",
            "groups or matches on `reason`",
        ),
        (
            "ratelimit_store_keys / on (tier) ratelimit_store_max_keys",
            "groups or matches on `tier`",
        ),
        ("ratelimit_decisions_total_bucket", "not a histogram"),
        ("ratelimit_retry_after_seconds", "is a histogram"),
        ("rate(http_requests_total[5m])", "not a ratelimit metric"),
        ("sum(rate(ratelimit_decisions_total[5m]", "does not parse"),
        ("vector(1)", "selects no metric"),
    ] {
        let c = check(bad);
        assert!(
            c.errors.iter().any(|e| e.contains(says)),
            "`{bad}`: expected {says:?}, got {:?}",
            c.errors
        );
    }
}

// ---------------------------------------------------------------------------
// The Grafana dashboard.

/// Grafana's own variables, replaced by a value of the right kind before
/// parsing (the dashboard's template variables become `.*`).
const GRAFANA_VARIABLES: &[(&str, &str)] = &[
    ("$__rate_interval", "5m"),
    ("$__interval", "1m"),
    ("$__range", "1h"),
    ("${__range}", "1h"),
];

/// `expr` with every Grafana variable replaced, or the one it does not know.
fn substitute(expr: &str, variables: &BTreeSet<String>) -> Result<String, String> {
    let mut s = expr.to_owned();
    for (var, value) in GRAFANA_VARIABLES {
        s = s.replace(var, value);
    }
    // Longest first, so that `$route` does not eat into `$routes`.
    let mut vars: Vec<_> = variables.iter().collect();
    vars.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for v in vars {
        s = s.replace(&format!("${{{v}}}"), ".*").replace(&format!("${v}"), ".*");
    }
    match s.find('$') {
        Some(i) => Err(format!("unknown variable at `{}`", &s[i..])),
        None => Ok(s),
    }
}

/// Every panel, rows' nested panels included, with where it sits.
fn panels<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
    for p in list {
        out.push(p);
        if let Some(nested) = p.get("panels").and_then(Value::as_array) {
            panels(nested, out);
        }
    }
}

fn title(p: &Value) -> String {
    format!("panel {:?} (id {})", p["title"].as_str().unwrap_or("?"), p["id"])
}

#[test]
fn dashboard_charts_only_exported_metrics_and_all_of_them() {
    let (path, text) = docs("grafana/ratelimit-dashboard.json");
    let file = path.display().to_string();
    let dash: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: not JSON: {e}"));
    let mut problems = Vec::new();

    // An importable dashboard model.
    let schema = dash["schemaVersion"].as_u64().unwrap_or(0);
    if !(36..=41).contains(&schema) {
        problems.push(format!("schemaVersion {schema}: expected 36..=41"));
    }
    for key in ["title", "uid"] {
        if !matches!(dash[key].as_str(), Some(s) if !s.is_empty()) {
            problems.push(format!("no `{key}`"));
        }
    }

    // Template variables: a Prometheus data source and query variables.
    let vars = dash["templating"]["list"].as_array().cloned().unwrap_or_default();
    let mut names = BTreeSet::new();
    let mut found = BTreeSet::new();
    for v in &vars {
        let name = v["name"].as_str().unwrap_or_default().to_owned();
        match v["type"].as_str() {
            Some("datasource") if v["query"] == "prometheus" => {}
            Some("datasource") => problems.push(format!("variable {name}: not a Prometheus data source")),
            Some("query") => {
                let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap_or_default();
                // label_values(SELECTOR, LABEL): the selector is PromQL, the
                // label one its metric has.
                let inner = q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')'));
                let Some((selector, label)) = inner.and_then(|i| i.rsplit_once(',')) else {
                    problems.push(format!("variable {name}: `{q}` is not label_values(SELECTOR, LABEL)"));
                    continue;
                };
                let place = format!("variable {name}");
                match substitute(selector, &names) {
                    Err(e) => problems.push(format!("{place}: {e}\n    expr: {q}")),
                    Ok(s) => {
                        let mut c = check(&s);
                        let label = label.trim();
                        for m in &c.metrics {
                            let m = find(m).expect("resolved");
                            if !has_label(m, false, label) {
                                c.errors.push(format!("`{}` has no label `{label}`", m.name));
                            }
                        }
                        report(&mut problems, &place, q, &c);
                    }
                }
                if v["datasource"]["uid"] != "${datasource}" {
                    problems.push(format!("variable {name}: datasource is not ${{datasource}}"));
                }
            }
            other => problems.push(format!("variable {name}: unexpected type {other:?}")),
        }
        names.insert(name);
    }
    for want in ["datasource", "instance", "route"] {
        if !names.contains(want) {
            problems.push(format!("no template variable `{want}`"));
        }
    }

    // Panels: a grid position, the data source variable, and expressions.
    let mut all = Vec::new();
    panels(
        dash["panels"].as_array().map(Vec::as_slice).unwrap_or_default(),
        &mut all,
    );
    let mut ids = BTreeSet::new();
    let mut exprs = 0;
    for p in all {
        let place = title(p);
        if !ids.insert(p["id"].as_u64().unwrap_or(0)) {
            problems.push(format!("{place}: id missing or not unique"));
        }
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        match (x, w, h, g["y"].as_u64()) {
            (Some(x), Some(w), Some(h), Some(_)) if w > 0 && h > 0 && x + w <= 24 => {}
            _ => problems.push(format!("{place}: gridPos {g} is not within the 24-column grid")),
        }
        if p["type"] == "row" {
            continue;
        }
        if p["datasource"]["uid"] != "${datasource}" {
            problems.push(format!("{place}: datasource is not ${{datasource}}"));
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{place}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for t in targets {
            let place = format!("{place} target {}", t["refId"]);
            if !refs.insert(t["refId"].as_str().unwrap_or_default()) {
                problems.push(format!("{place}: refId missing or not unique"));
            }
            let Some(expr) = t["expr"].as_str() else {
                problems.push(format!("{place}: no expr"));
                continue;
            };
            exprs += 1;
            match substitute(expr, &names) {
                Err(e) => problems.push(format!("{place}: {e}\n    expr: {expr}")),
                Ok(s) => {
                    let c = check(&s);
                    report(&mut problems, &place, expr, &c);
                    found.extend(c.metrics);
                }
            }
        }
    }
    if exprs == 0 {
        problems.push("no expressions at all".to_owned());
    }

    // Every metric the library exports has a panel, or a reason not to.
    for m in CATALOGUE {
        let left_out = LEFT_OUT.iter().any(|(n, _)| *n == m.name);
        if !found.contains(m.name) && !left_out {
            problems.push(format!(
                "no panel charts `{}` (chart it, or add it to LEFT_OUT with a reason)",
                m.name
            ));
        }
        if found.contains(m.name) && left_out {
            problems.push(format!("`{}` is charted but listed in LEFT_OUT", m.name));
        }
    }
    for (n, _) in LEFT_OUT {
        if find(n).is_none() {
            problems.push(format!("LEFT_OUT names `{n}`, which is not in the catalogue"));
        }
    }
    fail_loudly(&file, &problems);
}

// ---------------------------------------------------------------------------
// The Prometheus alert rules.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    name: String,
    #[serde(default)]
    interval: Option<String>,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    #[serde(default)]
    alert: Option<String>,
    #[serde(default)]
    record: Option<String>,
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// The queries inside an annotation's template: each backquoted string that
/// names a ratelimit metric (a `printf` format: `%s` and the like become a
/// plain value).
fn template_queries(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|q| q.contains("ratelimit_"))
        .map(|q| q.replace("%s", "x").replace("%q", "\"x\"").replace("%v", "x"))
        .collect()
}

/// Every `ratelimit_…` word in `text`.
fn metric_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("ratelimit_"))
}

#[test]
fn alert_rules_use_only_exported_metrics_and_cover_the_issue() {
    let (path, text) = docs("prometheus/ratelimit-alerts.yml");
    let file = path.display().to_string();
    let rules: RuleFile = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{file}: not a rules file: {e}"));
    let mut problems = Vec::new();
    let mut alerts: BTreeMap<&str, (&Rule, Checked)> = BTreeMap::new();
    if rules.groups.is_empty() {
        problems.push("no groups".to_owned());
    }
    for g in &rules.groups {
        if g.name.is_empty() || g.rules.is_empty() {
            problems.push(format!("group {:?}: no name or no rules", g.name));
        }
        let durations = g.interval.iter().map(|d| ("interval", d));
        for (what, d) in durations {
            if promql_parser::util::parse_duration(d).is_err() {
                problems.push(format!("group {}: {what} {d:?} is not a duration", g.name));
            }
        }
        for r in &g.rules {
            let Some(name) = r.alert.as_deref() else {
                problems.push(format!(
                    "group {}: a rule that is not an alert ({:?})",
                    g.name, r.record
                ));
                continue;
            };
            let place = format!("alert {name}");
            let c = check(&r.expr);
            report(&mut problems, &place, &r.expr, &c);
            for d in r.for_.iter().chain(&r.keep_firing_for) {
                if promql_parser::util::parse_duration(d).is_err() {
                    problems.push(format!("{place}: {d:?} is not a duration"));
                }
            }
            if r.for_.is_none() {
                problems.push(format!("{place}: no `for:`"));
            }
            if !matches!(
                r.labels.get("severity").map(String::as_str),
                Some("info" | "warning" | "critical")
            ) {
                problems.push(format!("{place}: severity label missing or not info|warning|critical"));
            }
            for a in ["summary", "description"] {
                if !matches!(r.annotations.get(a), Some(t) if !t.trim().is_empty()) {
                    problems.push(format!("{place}: no `{a}` annotation"));
                }
            }
            for (a, t) in &r.annotations {
                for q in template_queries(t) {
                    report(&mut problems, &format!("{place} annotation {a} query"), &q, &check(&q));
                }
                for w in metric_words(t) {
                    // A histogram may be named bare in prose.
                    if find(w).is_none() {
                        if let Err(e) = resolve(w) {
                            problems.push(format!("{place} annotation {a}: {e}"));
                        }
                    }
                }
            }
            if alerts.insert(name, (r, c)).is_some() {
                problems.push(format!("{place}: defined twice"));
            }
        }
    }
    for (name, want_for, reads) in REQUIRED_ALERTS {
        let Some((r, c)) = alerts.get(name) else {
            problems.push(format!("no alert {name}"));
            continue;
        };
        if let Some(f) = want_for {
            if r.for_.as_deref() != Some(*f) {
                problems.push(format!("alert {name}: `for: {:?}`, expected {f}", r.for_));
            }
        }
        for m in *reads {
            if !c.metrics.contains(m) {
                problems.push(format!("alert {name}: does not read `{m}`\n    expr: {}", r.expr));
            }
        }
    }
    fail_loudly(&file, &problems);
}

/// `docs/prometheus/ratelimit-alerts.test.yml`, the rules' unit tests: its
/// made-up series are series the library exports, and `promtool test rules`
/// passes (promtool: Debian's `prometheus` package, which `scripts/test`
/// installs).
#[test]
fn alert_rule_tests_feed_exported_series_and_pass_promtool() {
    let (path, text) = docs("prometheus/ratelimit-alerts.test.yml");
    let file = path.display().to_string();
    let tests: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
    let mut problems = Vec::new();
    let mut series = 0;
    for t in tests["tests"].as_sequence().map(Vec::as_slice).unwrap_or_default() {
        for s in t["input_series"].as_sequence().map(Vec::as_slice).unwrap_or_default() {
            let Some(s) = s["series"].as_str() else {
                problems.push(format!("an input series with no `series`: {s:?}"));
                continue;
            };
            series += 1;
            report(&mut problems, "input series", s, &check(s));
        }
    }
    if series == 0 {
        problems.push("no input series".to_owned());
    }
    fail_loudly(&file, &problems);

    let dir = path.parent().expect("docs/prometheus");
    for args in [
        &["check", "rules", "ratelimit-alerts.yml"][..],
        &["test", "rules", "ratelimit-alerts.test.yml"],
    ] {
        let out = match std::process::Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()
        {
            Ok(out) => out,
            // Never skipped: `scripts/test` installs it (Debian's
            // `prometheus` package).
            Err(e) => panic!(
                "promtool {}: {e} (install Debian's `prometheus` package, as scripts/test does)",
                args.join(" ")
            ),
        };
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
