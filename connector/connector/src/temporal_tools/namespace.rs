//! Which namespaces the Temporal tools may touch (R-OPS-2).
//!
//! Every tool takes an optional `namespace`. By default only the connector's own namespace is
//! allowed; `--allowed-namespaces` widens that to a finite list (which must include the
//! connector's namespace, so the default keeps working) or to `*`. The check runs before any
//! request is built, so a denied namespace never reaches Temporal.

use std::collections::BTreeSet;

/// The namespaces a toolset may operate on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespacePolicy {
    /// Any namespace the connection's credentials reach.
    Any,
    /// Only these (always including the default namespace).
    Only(BTreeSet<String>),
}

/// Why `--allowed-namespaces` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("--allowed-namespaces is empty: give a comma list (e.g. `default,payments`) or `*`")]
    Empty,
    #[error("--allowed-namespaces mixes `*` with names: give either `*` or a list of names")]
    MixedWildcard,
    #[error(
        "--allowed-namespaces {list:?} does not include the connector's namespace {default:?}; add it to the list"
    )]
    MissingDefault { list: String, default: String },
}

/// A namespace a tool call asked for and may not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {requested:?} is not allowed here (allowed: {allowed}); omit `namespace` to use {default:?}, or ask the operator to add it to --allowed-namespaces"
)]
pub struct NamespaceDenied {
    pub requested: String,
    pub allowed: String,
    pub default: String,
}

impl NamespacePolicy {
    /// Only the default namespace: what a connector allows unless told otherwise.
    pub fn default_only(default: &str) -> Self {
        Self::Only(BTreeSet::from([default.to_owned()]))
    }

    /// Parses `--allowed-namespaces`: `*`, or a comma list that must name `default`.
    pub fn parse(spec: &str, default: &str) -> Result<Self, PolicyError> {
        let names: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            return Err(PolicyError::Empty);
        }
        if names.contains(&"*") {
            return if names.len() == 1 {
                Ok(Self::Any)
            } else {
                Err(PolicyError::MixedWildcard)
            };
        }
        if !names.contains(&default) {
            return Err(PolicyError::MissingDefault {
                list: spec.to_owned(),
                default: default.to_owned(),
            });
        }
        Ok(Self::Only(names.into_iter().map(str::to_owned).collect()))
    }

    /// The namespace a call uses: the requested one when allowed, else the default when none
    /// was requested (an empty string counts as none).
    pub fn resolve(
        &self,
        requested: Option<&str>,
        default: &str,
    ) -> Result<String, NamespaceDenied> {
        let requested = match requested.map(str::trim) {
            None | Some("") => return Ok(default.to_owned()),
            Some(ns) => ns,
        };
        match self {
            Self::Any => Ok(requested.to_owned()),
            Self::Only(names) if names.contains(requested) => Ok(requested.to_owned()),
            Self::Only(names) => Err(NamespaceDenied {
                requested: requested.to_owned(),
                allowed: names.iter().cloned().collect::<Vec<_>>().join(", "),
                default: default.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_only_the_connectors_namespace() {
        let p = NamespacePolicy::default_only("default");
        assert_eq!(p.resolve(None, "default").unwrap(), "default");
        assert_eq!(p.resolve(Some(""), "default").unwrap(), "default");
        assert_eq!(p.resolve(Some("default"), "default").unwrap(), "default");
        let denied = p.resolve(Some("payments"), "default").unwrap_err();
        assert_eq!(denied.requested, "payments");
        assert!(
            denied.to_string().contains("--allowed-namespaces"),
            "{denied}"
        );
    }

    #[test]
    fn a_finite_list_must_include_the_default() {
        let p = NamespacePolicy::parse("default, payments", "default").unwrap();
        assert_eq!(p.resolve(Some("payments"), "default").unwrap(), "payments");
        assert!(p.resolve(Some("billing"), "default").is_err());
        let err = NamespacePolicy::parse("payments", "default").unwrap_err();
        assert!(matches!(err, PolicyError::MissingDefault { .. }), "{err}");
        assert!(err.to_string().contains("\"default\""), "{err}");
    }

    #[test]
    fn star_allows_any_namespace_and_stands_alone() {
        let p = NamespacePolicy::parse("*", "default").unwrap();
        assert_eq!(p, NamespacePolicy::Any);
        assert_eq!(p.resolve(Some("anything"), "default").unwrap(), "anything");
        assert_eq!(
            NamespacePolicy::parse("*,default", "default").unwrap_err(),
            PolicyError::MixedWildcard
        );
        assert_eq!(
            NamespacePolicy::parse(" , ", "default").unwrap_err(),
            PolicyError::Empty
        );
    }

    #[test]
    fn names_are_exact_not_prefixes() {
        let p = NamespacePolicy::parse("default", "default").unwrap();
        assert!(p.resolve(Some("default2"), "default").is_err());
        assert!(p.resolve(Some("DEFAULT"), "default").is_err());
    }
}
