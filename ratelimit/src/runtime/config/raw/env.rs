//! `RATELIMIT__*` environment overrides: which variables are ours, and how
//! each one changes the parsed document before validation.

use super::schema::RawConfig;
use crate::runtime::config::{ConfigError, ENV_PREFIX};

/// The `RATELIMIT__*` variables of the process environment. Variables that
/// are not valid Unicode are skipped unless they are ours, which is an error.
pub(in crate::runtime::config) fn env_overrides() -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (name, value) in std::env::vars_os() {
        let ours = name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes());
        if !ours {
            continue;
        }
        match (name.into_string(), value.into_string()) {
            (Ok(n), Ok(v)) => out.push((n, v)),
            (Ok(n), Err(_)) => {
                return Err(ConfigError::new(
                    "environment",
                    format!("{n}: the value is not valid UTF-8"),
                ));
            }
            (Err(n), _) => {
                return Err(ConfigError::new(
                    "environment",
                    format!("{}: the name is not valid UTF-8", n.to_string_lossy()),
                ));
            }
        }
    }
    Ok(out)
}

/// The name errors of the overrides are reported under.
pub(super) fn source_name(overrides: &[(String, String)]) -> String {
    let names: Vec<&str> = overrides.iter().map(|(k, _)| k.as_str()).collect();
    format!("environment overrides ({})", names.join(", "))
}

/// Applies the overrides; returns the configuration and the dotted paths
/// (as spelled in the file) that were overridden.
pub(super) fn apply_env(text: &str, overrides: &[(String, String)]) -> Result<(RawConfig, Vec<String>), ConfigError> {
    let source = source_name(overrides);
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::new(&source, e.message().to_owned()))?;
    let mut paths = Vec::new();
    for (name, value) in overrides {
        let wanted: Vec<&str> = name[ENV_PREFIX.len()..].split("__").collect();
        if wanted.iter().any(|s| s.is_empty()) {
            return Err(ConfigError::new(&source, format!("{name}: empty path segment")));
        }
        // Match each segment against the keys present, ignoring case; inside
        // `profiles` and `routes` (names chosen in the file) a segment must
        // name an existing entry.
        let mut path: Vec<String> = Vec::new();
        {
            let mut node: Option<&toml::Table> = Some(&table);
            for (depth, seg) in wanted.iter().enumerate() {
                let existing: Vec<&String> = node
                    .map(|t| t.keys().filter(|k| k.eq_ignore_ascii_case(seg)).collect())
                    .unwrap_or_default();
                let in_named_map = depth == 1 && matches!(path[0].as_str(), "profiles" | "routes");
                let key = match existing.as_slice() {
                    [one] => (*one).clone(),
                    [] if in_named_map => {
                        return Err(ConfigError::new(
                            &source,
                            format!("{name}: there is no {} named {seg:?} in the file; overrides change existing entries only", path[0].trim_end_matches('s')),
                        ));
                    }
                    [] => seg.to_ascii_lowercase(),
                    _ => {
                        return Err(ConfigError::new(
                            &source,
                            format!("{name}: {seg:?} matches several keys that differ only in case"),
                        ));
                    }
                };
                node = node.and_then(|t| t.get(&key)).and_then(toml::Value::as_table);
                path.push(key);
            }
        }
        paths.push(path.join("."));
        let value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        let (last, parents) = path.split_last().expect("non-empty: split yields one item at least");
        let mut node = &mut table;
        for seg in parents {
            let entry = node
                .entry(seg.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            node = match entry {
                toml::Value::Table(t) => t,
                _ => {
                    return Err(
                        ConfigError::new(&source, format!("{name}: {seg} is not a table")).with_field(path.join("."))
                    );
                }
            };
        }
        node.insert(last.clone(), value);
    }
    let raw = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::new(&source, e.message().trim().to_owned()))?;
    Ok((raw, paths))
}

/// An error of validation after overrides: on an overridden field (or one
/// inside it) it is the environment's, not the file's, and has no position
/// in the file.
pub(super) fn blame(e: ConfigError, overrides: &[(String, String)], paths: &[String]) -> ConfigError {
    let overridden = e
        .field()
        .is_some_and(|f| paths.iter().any(|p| f == p || f.starts_with(&format!("{p}."))));
    if !overridden {
        return e;
    }
    let env = ConfigError::new(&source_name(overrides), e.message());
    match e.field() {
        Some(f) => env.with_field(f),
        None => env,
    }
}
