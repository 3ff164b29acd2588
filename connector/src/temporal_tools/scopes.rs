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
    fn unknown_keys_are_refused() {
        assert!(serde_yaml::from_str::<FamilyScopes>("{delete: x}").is_err());
    }
}
