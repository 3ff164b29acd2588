//! OAuth scopes per tool family (R-OPS-5): with inbound OAuth, the operator names a scope for
//! reading, another for writing and another for the destructive tools, so a token that may look
//! at Workflows cannot terminate them. Every family must have one (fail closed: a family left
//! out would be open to every token), and the batch tools also need the read scope, since their
//! answer counts the Workflows a query matches.

use serde::Deserialize;

use super::catalog::ToolFamily;

/// The scope each family needs. With inbound OAuth every family must have one
/// ([`FamilyScopes::missing`] says which do not; the connector refuses to start then).
///
/// There is no `Default`: a toolset without scopes refuses every authenticated caller, and a
/// family without a scope refuses its tools to them (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyScopes {
    pub read: Option<String>,
    pub write: Option<String>,
    pub admin: Option<String>,
    /// With `--temporal-tools-decode`: the scope a token needs for the tools that show
    /// decoded values (R-OPS-7).
    #[serde(default)]
    pub decode: Option<String>,
}

impl FamilyScopes {
    /// Parses `read=S,write=S,admin=S` (any subset, each at most once), as given on the command
    /// line. A scope is an RFC 6749 scope token: printable ASCII without spaces, quotes or
    /// backslashes.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut scopes = Self::none();
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
                "decode" => &mut scopes.decode,
                other => {
                    return Err(format!(
                        "{part:?}: unknown tool family {other:?} (read, write, admin or decode)"
                    ));
                }
            };
            if slot.replace(scope.to_owned()).is_some() {
                return Err(format!("{part:?}: family {family:?} given twice"));
            }
        }
        if scopes == Self::none() {
            return Err("no FAMILY=SCOPE given (read, write or admin)".into());
        }
        Ok(scopes)
    }

    /// No scope for any family: every family [`missing`](Self::missing), and no tool callable
    /// by an authenticated caller.
    pub fn none() -> Self {
        Self {
            read: None,
            write: None,
            admin: None,
            decode: None,
        }
    }

    /// The scope `family` needs, if any.
    pub fn required(&self, family: ToolFamily) -> Option<&str> {
        match family {
            ToolFamily::Read => self.read.as_deref(),
            ToolFamily::Write => self.write.as_deref(),
            ToolFamily::Admin => self.admin.as_deref(),
        }
    }

    /// The families without a scope, as named on the command line.
    pub fn missing(&self) -> Vec<&'static str> {
        [
            ("read", &self.read),
            ("write", &self.write),
            ("admin", &self.admin),
        ]
        .into_iter()
        .filter(|(_, scope)| scope.is_none())
        .map(|(family, _)| family)
        .collect()
    }

    /// Every scope calling `tool` (of `family`) needs: its family's, and for a batch tool
    /// also read's, since its answer says how many Workflows matched. `None` when one of them
    /// is not named: the tool is then refused to every authenticated caller (fail closed).
    pub fn for_tool(&self, tool: &str, family: ToolFamily) -> Option<Vec<&str>> {
        let mut needed = vec![self.required(family)?];
        if tool.starts_with("batch_") {
            let read = self.required(ToolFamily::Read)?;
            if !needed.contains(&read) {
                needed.push(read);
            }
        }
        Some(needed)
    }

    /// [`Self::for_tool`], and the decode scope too when the call shows decoded values
    /// (`decodes`, R-OPS-7); `None` when one of them is not named.
    pub fn for_call(&self, tool: &str, family: ToolFamily, decodes: bool) -> Option<Vec<&str>> {
        let mut needed = self.for_tool(tool, family)?;
        if decodes {
            needed.push(self.decode.as_deref()?);
        }
        Some(needed)
    }

    /// `Err(scope)` naming the first missing scope when `granted` lacks what `tool` needs
    /// (`Err("")` when a scope it needs is not named at all).
    pub fn check<'a>(
        &'a self,
        tool: &str,
        family: ToolFamily,
        granted: &[String],
    ) -> Result<(), &'a str> {
        let Some(needed) = self.for_tool(tool, family) else {
            return Err("");
        };
        match needed
            .into_iter()
            .find(|scope| !granted.iter().any(|g| g == scope))
        {
            Some(scope) => Err(scope),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_needs_its_own_scope_when_configured() {
        let scopes =
            FamilyScopes::parse("read=temporal.read,write=temporal.write,admin=temporal.admin")
                .unwrap();
        let reader = vec!["temporal.read".to_owned()];
        let check = |tool, family, granted: &[String]| scopes.check(tool, family, granted);
        assert_eq!(
            check("describe_workflow", ToolFamily::Read, &reader),
            Ok(())
        );
        assert_eq!(
            check("start_workflow", ToolFamily::Write, &reader),
            Err("temporal.write")
        );
        assert_eq!(
            check("terminate_workflow", ToolFamily::Admin, &reader),
            Err("temporal.admin")
        );
        assert_eq!(
            check("list_workflows", ToolFamily::Read, &[]),
            Err("temporal.read")
        );
    }

    #[test]
    fn batch_tools_also_need_read_since_they_count_matches() {
        let scopes =
            FamilyScopes::parse("read=temporal.read,write=temporal.write,admin=temporal.admin")
                .unwrap();
        let writer = vec!["temporal.write".to_owned()];
        assert_eq!(
            scopes.check("batch_cancel", ToolFamily::Write, &writer),
            Err("temporal.read")
        );
        assert_eq!(
            scopes.check("cancel_workflow", ToolFamily::Write, &writer),
            Ok(())
        );
        let both = vec!["temporal.write".to_owned(), "temporal.read".to_owned()];
        assert_eq!(
            scopes.check("batch_cancel", ToolFamily::Write, &both),
            Ok(())
        );
    }

    #[test]
    fn a_family_left_out_is_reported_missing() {
        let scopes = FamilyScopes::parse("read=temporal.read,admin=temporal.admin").unwrap();
        assert_eq!(scopes.missing(), ["write"]);
        assert_eq!(FamilyScopes::none().missing(), ["read", "write", "admin"]);
        let all = FamilyScopes::parse("read=r,write=w,admin=a").unwrap();
        assert!(all.missing().is_empty());
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
    fn a_family_without_a_scope_is_closed_not_open() {
        let read_only = FamilyScopes::parse("read=r").unwrap();
        assert_eq!(
            read_only.for_tool("describe_workflow", ToolFamily::Read),
            Some(vec!["r"])
        );
        assert_eq!(
            read_only.for_tool("start_workflow", ToolFamily::Write),
            None
        );
        assert_eq!(
            read_only.check("start_workflow", ToolFamily::Write, &["r".into()]),
            Err("")
        );
        let writes = FamilyScopes::parse("write=w").unwrap();
        assert_eq!(writes.for_tool("batch_signal", ToolFamily::Write), None);
        assert_eq!(
            FamilyScopes::none().for_tool("list_workflows", ToolFamily::Read),
            None
        );
        assert_eq!(
            FamilyScopes::parse("read=r,decode=d")
                .unwrap()
                .decode
                .as_deref(),
            Some("d")
        );
    }

    #[test]
    fn decoding_calls_also_need_the_decode_scope_and_close_without_one() {
        let with = FamilyScopes::parse("read=r,write=w,admin=a,decode=d").unwrap();
        let event = |scopes: &FamilyScopes, decodes| {
            scopes
                .for_call("get_workflow_event", ToolFamily::Read, decodes)
                .map(|v| v.join(","))
        };
        assert_eq!(event(&with, true).as_deref(), Some("r,d"));
        assert_eq!(event(&with, false).as_deref(), Some("r"));
        let without = FamilyScopes::parse("read=r,write=w,admin=a").unwrap();
        assert_eq!(event(&without, true), None);
        assert_eq!(event(&without, false).as_deref(), Some("r"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(serde_saphyr::from_str::<FamilyScopes>("{delete: x}").is_err());
    }
}
