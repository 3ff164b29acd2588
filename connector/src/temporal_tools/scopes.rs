//! OAuth scopes per tool family (R-OPS-5): with inbound OAuth, an operator can require a scope
//! for reading, another for writing and another for the destructive tools, so a token that may
//! look at Workflows cannot terminate them.

use serde::Deserialize;

use super::catalog::ToolFamily;

/// The scope each family needs; a family without one needs only the connector's own
/// `required_scopes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyScopes {
    pub read: Option<String>,
    pub write: Option<String>,
    pub admin: Option<String>,
}

impl FamilyScopes {
    /// Parses `read=S,write=S,admin=S` (any subset, each at most once), as given on the command
    /// line. A scope is an RFC 6749 scope token: printable ASCII without spaces, quotes or
    /// backslashes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut scopes = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((family, scope)) = part.split_once('=') else {
                return Err(format!(
                    "{part:?}: expected FAMILY=SCOPE, e.g. admin=temporal.admin"
                ));
            };
            let scope = scope.trim();
            if scope.is_empty()
                || !scope
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\'))
            {
                return Err(format!(
                    "{part:?}: {scope:?} is not a scope token (printable, no spaces, quotes or backslashes)"
                ));
            }
            let slot = match family.trim() {
                "read" => &mut scopes.read,
                "write" => &mut scopes.write,
                "admin" => &mut scopes.admin,
                other => {
                    return Err(format!(
                        "{part:?}: unknown tool family {other:?} (read, write or admin)"
                    ));
                }
            };
            if slot.replace(scope.to_owned()).is_some() {
                return Err(format!("{part:?}: family {family:?} given twice"));
            }
        }
        if scopes == Self::default() {
            return Err("no FAMILY=SCOPE given (read, write or admin)".into());
        }
        Ok(scopes)
    }

    /// The scope `family` needs, if any.
    pub fn required(&self, family: ToolFamily) -> Option<&str> {
        match family {
            ToolFamily::Read => self.read.as_deref(),
            ToolFamily::Write => self.write.as_deref(),
            ToolFamily::Admin => self.admin.as_deref(),
        }
    }

    /// `Err(scope)` naming the missing scope when `granted` lacks what `family` needs.
    pub fn check<'a>(&'a self, family: ToolFamily, granted: &[String]) -> Result<(), &'a str> {
        match self.required(family) {
            Some(scope) if !granted.iter().any(|g| g == scope) => Err(scope),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_needs_its_own_scope_when_configured() {
        let scopes: FamilyScopes =
            serde_yaml::from_str("{read: temporal.read, admin: temporal.admin}").unwrap();
        let reader = vec!["temporal.read".to_owned()];
        assert_eq!(scopes.check(ToolFamily::Read, &reader), Ok(()));
        assert_eq!(
            scopes.check(ToolFamily::Write, &reader),
            Ok(()),
            "write needs nothing extra"
        );
        assert_eq!(
            scopes.check(ToolFamily::Admin, &reader),
            Err("temporal.admin")
        );
        assert_eq!(scopes.check(ToolFamily::Read, &[]), Err("temporal.read"));
    }

    #[test]
    fn the_command_line_form_parses_and_names_what_is_wrong() {
        let scopes = FamilyScopes::parse("read=temporal.read, admin=temporal.admin").unwrap();
        assert_eq!(scopes.required(ToolFamily::Read), Some("temporal.read"));
        assert_eq!(scopes.required(ToolFamily::Write), None);
        assert_eq!(scopes.required(ToolFamily::Admin), Some("temporal.admin"));
        for (bad, says) in [
            ("", "no FAMILY=SCOPE"),
            ("admin", "expected FAMILY=SCOPE"),
            ("delete=x", "unknown tool family"),
            ("admin=", "not a scope token"),
            ("admin=a b", "not a scope token"),
            ("admin=a\u{7}", "not a scope token"),
            ("admin=a,admin=b", "given twice"),
        ] {
            let err = FamilyScopes::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(serde_yaml::from_str::<FamilyScopes>("{delete: x}").is_err());
    }
}
