//! The connector's `instructions` (R-CON-41): its routes' upstream instructions, merged in
//! route order, bounded, in its `initialize` answer and its `server/discover` answer.

use std::time::Duration;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{DiscoverResult, InitializeRequestParams, InitializeResult},
    service::RequestContext,
};

use super::Typed;
use crate::route::Route;

/// The most bytes of one route's instructions the connector passes on; a longer text is cut
/// at a character boundary and ends with [`CUT_MARK`].
pub const MAX_ROUTE_INSTRUCTIONS: usize = 8 * 1024;
/// The most bytes of the merged instructions; sections past it are left out, and a last line
/// says how many.
pub const MAX_INSTRUCTIONS: usize = 32 * 1024;
/// Ends a route's instructions that were cut.
pub const CUT_MARK: &str = "\n[…]";
/// How long an `initialize` waits for routes whose cached listing is stale; past it, the
/// routes' last good instructions are answered.
pub const INSTRUCTIONS_WAIT: Duration = Duration::from_secs(2);

/// Merges the routes' instructions (R-CON-41): one route's text as its upstream wrote it (cut
/// to [`MAX_ROUTE_INSTRUCTIONS`]); with several routes, one section per route that has
/// instructions, in route order, headed `## <service>`, separated by a blank line, at most
/// [`MAX_INSTRUCTIONS`] in all. `None` when no route has any.
pub fn merge_instructions(routes: &[Route], texts: &[Option<String>]) -> Option<String> {
    let given: Vec<(&Route, &str)> = routes
        .iter()
        .zip(texts)
        .filter_map(|(r, t)| Some((r, t.as_deref().filter(|t| !t.trim().is_empty())?)))
        .collect();
    if routes.len() == 1 {
        return given
            .first()
            .map(|(_, t)| bounded(t, MAX_ROUTE_INSTRUCTIONS));
    }
    let mut merged = String::new();
    for (i, (route, text)) in given.iter().enumerate() {
        let section = format!(
            "## {}\n{}",
            route.service,
            bounded(text, MAX_ROUTE_INSTRUCTIONS)
        );
        let separator = if merged.is_empty() { "" } else { "\n\n" };
        if merged.len() + separator.len() + section.len() > MAX_INSTRUCTIONS {
            let left = given.len() - i;
            merged.push_str(&format!(
                "{separator}(the instructions of {left} more services are left out)"
            ));
            break;
        }
        merged.push_str(separator);
        merged.push_str(&section);
    }
    (!merged.is_empty()).then_some(merged)
}

/// `text` cut to at most `max` bytes (mark included) at a character boundary.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - CUT_MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARK}", &text[..end])
}

impl Typed {
    /// The merged instructions of the routes (R-CON-41).
    async fn instructions(&self) -> Option<String> {
        let texts = self.route_instructions(INSTRUCTIONS_WAIT).await;
        merge_instructions(&self.inner.options.routes, &texts)
    }

    /// The `initialize` answer: rmcp's negotiation, with the routes' instructions.
    pub(super) async fn initialize_with_instructions(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        // The capabilities the routes declared (R-CON-45) shape the answer's capabilities.
        let (_, instructions) = tokio::join!(self.probe_declared(), self.instructions());
        let mut answer = self.negotiate_initialize(&request)?;
        answer.instructions = instructions;
        Ok(answer)
    }

    /// The `server/discover` answer (2026-07-28), with the routes' instructions.
    pub(super) async fn discover_with_instructions(&self) -> Result<DiscoverResult, McpError> {
        let (_, instructions) = tokio::join!(self.probe_declared(), self.instructions());
        let mut info = self.get_info();
        info.instructions = instructions;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(services: &[&str]) -> Vec<Route> {
        services.iter().map(|s| Route::new(*s, "e")).collect()
    }

    #[test]
    fn one_route_passes_its_instructions_on_as_written() {
        let one = routes(&["a"]);
        assert_eq!(
            merge_instructions(&one, &[Some("Use a.\n".into())]).as_deref(),
            Some("Use a.\n")
        );
        assert_eq!(merge_instructions(&one, &[None]), None);
        assert_eq!(merge_instructions(&one, &[Some("  ".into())]), None);
    }

    #[test]
    fn several_routes_get_one_section_each_in_route_order() {
        let three = routes(&["b", "a", "c"]);
        let texts = [Some("B".into()), None, Some("C".into())];
        assert_eq!(
            merge_instructions(&three, &texts).as_deref(),
            Some("## b\nB\n\n## c\nC")
        );
        assert_eq!(merge_instructions(&three, &[None, None, None]), None);
    }

    #[test]
    fn instructions_are_bounded_per_route_and_in_all() {
        let long = "é".repeat(MAX_ROUTE_INSTRUCTIONS);
        let one = merge_instructions(&routes(&["a"]), &[Some(long.clone())]).unwrap();
        assert!(one.len() <= MAX_ROUTE_INSTRUCTIONS && one.ends_with(CUT_MARK));
        let many: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        let names: Vec<&str> = many.iter().map(String::as_str).collect();
        let texts = vec![Some(long); 10];
        let merged = merge_instructions(&routes(&names), &texts).unwrap();
        assert!(merged.len() <= MAX_INSTRUCTIONS + 80, "{}", merged.len());
        assert!(merged.starts_with("## s0\n"));
        assert!(merged.ends_with("more services are left out)"), "{merged}");
    }
}
