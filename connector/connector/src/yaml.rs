//! Reading the YAML users write (`--route`, `--auth-config`): YAML 1.2 core booleans only (`yes`,
//! `on`, `y` stay strings), duplicate keys refused, and errors on one line that say where
//! (`at line 4, column 3`) and, for typed files, which key (`auth.leeway: ...`).

use serde::de::DeserializeOwned;

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        // As serde_yaml read them: `<<` merges and unknown tags are refused, not applied or
        // dropped, so a file means what it says.
        merge_keys: serde_saphyr::MergeKeyPolicy::Error,
        reject_unsupported_tags: true,
        // Our messages quote the error inside a sentence of their own: no multi-line snippet.
        with_snippet: false,
    }
}

/// The error's text without advice meant for the programmer (which option to set).
fn message(e: &serde_saphyr::Error) -> String {
    e.to_string()
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
}

/// Parses `text` into `T`; the error names the key it is about, if any, and where it is.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut path = None;
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    })
    .map_err(|e| match path.filter(|p| p != ".") {
        Some(path) => format!("{path}: {}", message(&e)),
        None => message(&e),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn merge_keys_and_unknown_tags_are_refused() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Route {
            service: String,
            endpoint: String,
        }
        assert!(from_str::<Route>("{<<: {service: a}, endpoint: e}").is_err());
        assert!(from_str::<Route>("{service: !secret a, endpoint: e}").is_err());
        assert!(from_str::<Route>("{service: a, endpoint: e}").is_ok());
    }

    #[test]
    fn errors_say_which_key_and_where() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Outer {
            inner: BTreeMap<String, u32>,
        }
        let e = from_str::<Outer>("inner:\n  a: 1\n  b: x\n").unwrap_err();
        assert!(e.starts_with("inner.b: "), "{e}");
        assert!(e.ends_with(" at line 3, column 6"), "{e}");
        let e = from_str::<Outer>("inner:\n  a: 1\n  a: 2\n").unwrap_err();
        assert!(e.contains("duplicate mapping key: a"), "{e}");
        assert!(!e.contains("Options"), "no advice for the programmer: {e}");
        assert!(e.contains("line 3"), "{e}");
        let e = from_str::<Outer>("inner: {a: 1\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let v: serde_json::Value = from_str("{a: yes, b: on, c: true}").unwrap();
        assert_eq!(v, serde_json::json!({"a": "yes", "b": "on", "c": true}));
    }
}
