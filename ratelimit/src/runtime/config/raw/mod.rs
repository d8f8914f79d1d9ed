//! From TOML text to a validated [`Config`]: parse keeping the parser's
//! spans, deserialize into the schema, apply environment overrides, and
//! validate.

mod embed;
mod env;
mod fields;
mod named;
mod schema;
mod spans;
mod validate;

use std::path::Path;

use serde::Deserialize;
use toml::de::{DeString, DeTable, DeValue};

pub(super) use env::env_overrides;
use schema::RawConfig;
use spans::Spans;
use validate::Ctx;

use super::error::line_col;
use super::{Config, ConfigError, ENV_PREFIX};

impl Config {
    /// Reads and validates a TOML file, then applies `RATELIMIT__*`
    /// environment overrides (see [`Config::from_toml_str_with_env`]).
    ///
    /// Errors name the file, the line and column, and the field.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, e))?;
        load(&text, Some(path), env::env_overrides()?)
    }

    /// Parses and validates TOML text, without environment overrides.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        load(text, None, std::iter::empty())
    }

    /// Parses TOML text, then applies overrides from `vars`: a variable named
    /// `RATELIMIT__PROFILES__STANDARD__RATE` sets `profiles.standard.rate`
    /// (path segments separated by `__`, matched case-insensitively). Values
    /// are read as TOML (`100`, `true`, `["10.0.0.0/8"]`) and otherwise as
    /// strings. An override can change an existing profile or route but not
    /// create one (a typo would otherwise change nothing, silently).
    ///
    /// ```
    /// use ratelimit::config::Config;
    ///
    /// let text = "default_profile = \"std\"\n[profiles.std]\nrate = \"10/s\"\n";
    /// let vars = [("RATELIMIT__PROFILES__STD__BURST".to_string(), "3".to_string())];
    /// let config = Config::from_toml_str_with_env(text, vars).unwrap();
    /// assert_eq!(config.default_quota().burst(), 3);
    /// ```
    pub fn from_toml_str_with_env(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        load(text, None, vars)
    }
}

fn load(
    text: &str,
    path: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let source = path.map_or_else(|| "<config>".to_owned(), |p| p.display().to_string());
    load_named(text, &source, vars)
}

/// [`load`], with errors naming `source`.
pub(super) fn load_named(
    text: &str,
    source: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let source = source.to_owned();
    let doc =
        DeTable::parse(text).map_err(|e| toml_error(&source, text, &e, |offset| spans::syntax_field(text, offset)))?;
    let spans = Spans::new(doc.get_ref());
    let raw = RawConfig::deserialize(toml::de::Deserializer::from(doc)).map_err(|e| {
        toml_error(&source, text, &e, |offset| {
            spans.field_at(offset).map(ToString::to_string)
        })
    })?;
    let ctx = Ctx {
        source: &source,
        text,
        spans: &spans,
    };

    let overrides: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
    if overrides.is_empty() {
        return validate::validate(raw, &ctx);
    }
    let (raw, paths) = env::apply_env(text, &overrides)?;
    validate::validate(raw, &ctx).map_err(|e| env::blame(e, &overrides, &paths))
}

/// [`load_named`], with every deserialization error of the file when it
/// has more than one: each top-level section, and each entry of `profiles`,
/// `routes` and `rules`, is read on its own, so that a mistake in one does
/// not hide the next (errors in one entry: its first). Validation, which
/// reads sections together, reports its first error.
pub(super) fn load_all(
    text: &str,
    source: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, Vec<ConfigError>> {
    let vars: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
    let overridden = !vars.is_empty();
    let first = match load_named(text, source, vars) {
        Ok(config) => return Ok(config),
        Err(e) => e,
    };
    let Ok(doc) = DeTable::parse(text) else {
        return Err(vec![first]);
    };
    let spans = Spans::new(doc.get_ref());
    let whole = doc.span();
    let alone = |key: &toml::Spanned<DeString<'_>>, value: toml::Spanned<DeValue<'_>>| {
        let mut table = DeTable::new();
        table.insert(key.clone(), value);
        RawConfig::deserialize(toml::de::Deserializer::from(toml::Spanned::new(whole.clone(), table)))
            .err()
            .map(|e| {
                toml_error(source, text, &e, |offset| {
                    spans.field_at(offset).map(ToString::to_string)
                })
            })
    };
    if RawConfig::deserialize(toml::de::Deserializer::from(doc.clone())).is_ok() {
        // The file reads; validation refused it (with the environment's
        // overrides, which the search below does not apply: the first only).
        if overridden {
            return Err(vec![first]);
        }
        return Err(validation_errors(text, source, &doc, first));
    }
    let mut errors: Vec<ConfigError> = Vec::new();
    for (key, value) in doc.get_ref().iter() {
        let span = value.span();
        let found: Vec<ConfigError> = match (&**key.get_ref(), value.get_ref()) {
            ("profiles" | "routes", DeValue::Table(entries)) => entries
                .iter()
                .filter_map(|(k, v)| {
                    let mut one = DeTable::new();
                    one.insert(k.clone(), v.clone());
                    alone(key, toml::Spanned::new(span.clone(), DeValue::Table(one)))
                })
                .collect(),
            ("rules", DeValue::Array(items)) => items
                .iter()
                .filter_map(|item| {
                    let mut one = toml::de::DeArray::new();
                    one.push(item.clone());
                    alone(key, toml::Spanned::new(span.clone(), DeValue::Array(one)))
                })
                .collect(),
            _ => alone(key, value.clone()).into_iter().collect(),
        };
        for e in found {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
    }
    // The whole file's first error is among them unless it came from
    // reading sections together (or from validation).
    if !errors.contains(&first) {
        errors.insert(0, first);
    }
    errors.sort_by_key(|e| (e.line().is_none(), e.line(), e.column()));
    Err(errors)
}

/// The most `[[rules]]` entries [`validation_errors`] sets aside.
const MAX_RULE_ERRORS: usize = 50;

/// Validation's first error, then, while it is in a `[[rules]]` entry, the
/// first error of the file without that entry, and so on: rules do not
/// depend on each other (but for their names), so setting one aside cannot
/// invent a problem in another. Errors elsewhere end the search (a section
/// set aside would make the rules that use it wrong).
fn validation_errors(
    text: &str,
    source: &str,
    doc: &toml::Spanned<DeTable<'_>>,
    first: ConfigError,
) -> Vec<ConfigError> {
    let rules_key = doc
        .get_ref()
        .iter()
        .find(|(k, _)| &**k.get_ref() == "rules")
        .map(|(k, _)| k.clone());
    let Some(rules_key) = rules_key else {
        return vec![first];
    };
    // The original index of each rule still in the document.
    let mut kept: Vec<usize> = match doc.get_ref().iter().find(|(k, _)| &**k.get_ref() == "rules") {
        Some((_, v)) => match v.get_ref() {
            DeValue::Array(items) => (0..items.len()).collect(),
            _ => return vec![first],
        },
        None => return vec![first],
    };
    let mut doc = doc.clone();
    let mut errors = vec![first];
    for _ in 0..MAX_RULE_ERRORS {
        let Some(index) = errors.last().and_then(|e| e.field()).and_then(rule_index) else {
            break;
        };
        // `index` is the original index; set aside the rule now at its place.
        let Some(at) = kept.iter().position(|&i| i == index) else {
            break;
        };
        kept.remove(at);
        let mut table = DeTable::new();
        for (k, v) in doc.get_ref().iter() {
            let v = match v.get_ref() {
                DeValue::Array(items) if k == &rules_key => {
                    let rest: toml::de::DeArray<'_> = items
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != at)
                        .map(|(_, item)| item.clone())
                        .collect();
                    toml::Spanned::new(v.span(), DeValue::Array(rest))
                }
                _ => v.clone(),
            };
            table.insert(k.clone(), v);
        }
        doc = toml::Spanned::new(doc.span(), table);
        let spans = Spans::new(doc.get_ref());
        let Ok(raw) = RawConfig::deserialize(toml::de::Deserializer::from(doc.clone())) else {
            break;
        };
        let ctx = Ctx {
            source,
            text,
            spans: &spans,
        };
        match validate::validate(raw, &ctx) {
            Ok(_) => break,
            Err(e) => {
                // Its rule index is in the shortened list: the original's.
                let e = match e.field().and_then(|f| Some((f, rule_index(f)?))) {
                    Some((field, i)) => match kept.get(i) {
                        Some(&orig) => {
                            let field = field.replacen(&format!("rules[{i}]"), &format!("rules[{orig}]"), 1);
                            let mut renamed = ConfigError::new(source, e.message()).with_field(field);
                            if let (Some(l), Some(c)) = (e.line(), e.column()) {
                                renamed = renamed.at(l, c);
                            }
                            renamed
                        }
                        None => e,
                    },
                    None => e,
                };
                if errors.contains(&e) {
                    break;
                }
                errors.push(e);
            }
        }
    }
    errors.sort_by_key(|e| (e.line().is_none(), e.line(), e.column()));
    errors
}

/// `3` of a field `rules[3]...`.
fn rule_index(field: &str) -> Option<usize> {
    field.strip_prefix("rules[")?.split_once(']')?.0.parse().ok()
}

/// An error on the field `field` (a dotted path of keys and array entries,
/// `service.id_secret_env`, `rules[0].key`) of a document that loaded, at its key in `text`.
pub(super) fn locate(text: &str, source: &str, field: &str, message: String) -> ConfigError {
    // `jwt.pem_file`, `rules[2].key`: keys, and array entries by index.
    let path = field.split('.').fold(spans::FieldPath::default(), |p, k| {
        match k.strip_suffix(']').and_then(|k| k.split_once('[')) {
            Some((key, i)) => match i.parse() {
                Ok(i) => p.key(key).index(i),
                Err(_) => p.key(k),
            },
            None => p.key(k),
        }
    });
    match DeTable::parse(text) {
        Ok(doc) => {
            let spans = Spans::new(doc.get_ref());
            let ctx = Ctx {
                source,
                text,
                spans: &spans,
            };
            ctx.error(&path, message)
        }
        Err(_) => ConfigError::new(source, message).with_field(field),
    }
}

/// An error of the TOML parser or of deserialization, at its span, on the
/// field `field_at` finds there.
fn toml_error(
    source: &str,
    text: &str,
    e: &toml::de::Error,
    field_at: impl FnOnce(usize) -> Option<String>,
) -> ConfigError {
    let mut err = ConfigError::new(source, e.message().trim().to_owned());
    if let Some(span) = e.span() {
        let (line, col) = line_col(text, span.start);
        err = err.at(line, col);
        if let Some(field) = field_at(span.start) {
            err = err.with_field(field);
        }
    }
    err
}
