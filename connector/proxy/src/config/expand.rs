//! `${NAME}`, `${NAME:-default}` and `$$` in config values (R-PRX-1).

use super::{ConfigError, invalid};

/// Expands `${NAME}`, `${NAME:-default}` and `$$` in `value`, the text of `field`. Error
/// messages name the field and the variable, never a variable's value.
pub(super) fn expand(
    value: &str,
    field: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(body_on) = after.strip_prefix('{') else {
            return Err(invalid(
                field,
                "a `$` must start ${NAME} or ${NAME:-default}; write $$ for a literal `$`",
            ));
        };
        let Some(end) = body_on.find('}') else {
            return Err(invalid(field, "`${` without a closing `}`"));
        };
        let body = &body_on[..end];
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        let valid_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(invalid(
                field,
                format!("`${{{body}}}`: not a valid environment variable name"),
            ));
        }
        match (env(name), default) {
            (Some(v), Some(default)) if v.is_empty() => out.push_str(default),
            (Some(v), _) => out.push_str(&v),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(invalid(
                    field,
                    format!("environment variable {name} is not set"),
                ));
            }
        }
        rest = &body_on[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
