//! Validation: from the parsed schema to a [`Config`], one section per
//! module, each error located at its field's key in the text.

mod global;
mod ip;
mod jwt;
mod profiles;
mod rules;
mod simple;
mod tls;

pub(super) use global::global;
pub(super) use jwt::jwt;
pub(super) use simple::{responses, service, store};

use super::schema::RawConfig;
use super::spans::{FieldPath, Spans};
use crate::runtime::config::error::line_col;
use crate::runtime::config::{Config, ConfigError};

/// What every check needs to report an error: the source's name, and where
/// each field is in the text.
pub(super) struct Ctx<'a> {
    pub(super) source: &'a str,
    pub(super) text: &'a str,
    pub(super) spans: &'a Spans,
}

impl Ctx<'_> {
    /// An error on the field `path`, at its key in the text when it is there.
    pub(super) fn error(&self, path: &FieldPath, message: impl Into<String>) -> ConfigError {
        let err = ConfigError::new(self.source, message).with_field(path.to_string());
        match self.spans.start_of(path) {
            Some(offset) => {
                let (line, col) = line_col(self.text, offset);
                err.at(line, col)
            }
            None => err,
        }
    }

    /// An error on a field that has no place in the text (a missing one).
    pub(super) fn missing(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.source, message).with_field(field)
    }
}

/// Checks every section, in the order the checks have always run (the first
/// error found is the one reported), and builds the
/// configuration.
pub(super) fn validate(raw: RawConfig, ctx: &Ctx<'_>) -> Result<Config, ConfigError> {
    let profiles = profiles::profiles(raw.profiles, ctx)?;
    let default_profile = profiles::default_profile(raw.default_profile, &profiles, ctx)?;
    let routes = profiles::routes(raw.routes, &profiles, &default_profile, ctx)?;
    let ip = ip::client_ip(raw.ip, ctx)?;
    let jwt = raw.jwt.map(|j| jwt::jwt(j, ctx)).transpose()?;
    let known = rules::Known {
        profiles: &profiles,
        routes: &routes,
        default_profile: &default_profile,
        jwt: jwt.is_some(),
        service: raw.service.is_some(),
    };
    let rules = rules::rules(raw.rules, &known, ctx)?;
    let responses = simple::responses(raw.responses, ctx)?;
    let service = raw.service.map(|s| simple::service(s, ctx)).transpose()?;
    let global = raw
        .global
        .map(|g| global::global(g, &profiles, jwt.as_ref(), ctx))
        .transpose()?;

    let tls = tls::tls(raw.tls, ctx)?;

    let Some(default) = profiles.get(&default_profile).cloned() else {
        return Err(ctx.missing("default_profile", "default profile missing"));
    };
    Ok(Config {
        default_profile,
        default,
        profiles,
        routes,
        store: simple::store(raw.store),
        ip,
        headers: raw.headers.style,
        header_keys: simple::header_keys(raw.header_keys),
        jwt,
        service,
        rules,
        global,
        responses,
        tls,
        plan: crate::runtime::plan::PlanCell::default(),
    })
}
