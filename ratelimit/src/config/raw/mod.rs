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
use toml::de::DeTable;

pub(super) use env::env_overrides;
use schema::RawConfig;
use spans::Spans;
use validate::Ctx;

use super::error::line_col;
use super::{Config, ConfigError, ENV_PREFIX};

pub(super) fn load(
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

/// An error on the field `field` (a dotted path of plain keys,
/// `service.id_secret_env`) of a document that loaded, at its key in `text`.
pub(super) fn locate(text: &str, source: &str, field: &str, message: String) -> ConfigError {
    let path = field.split('.').fold(spans::FieldPath::default(), |p, k| p.key(k));
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
