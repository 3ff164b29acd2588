//! Resources, resource templates, prompts and completions of the upstream (R-PRX-32): one MCP
//! request sent as written (with the `_meta` every request to the upstream's era carries,
//! R-PRX-33, declaring no input capability), its answer as the upstream wrote it.

use std::{collections::HashSet, time::Duration};

use rmcp::model::{ClientRequest, CustomRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value};

use super::{UpstreamClient, UpstreamError, to_json};
use durable_mcp_contract::features::{fold_pages, next_cursor, served_capabilities};

/// The most pages one list is followed for (R-PRX-32): a longer list is the upstream's fault
/// (or a cursor that never ends), and each page is one more request on the listing's clock.
pub const MAX_LIST_PAGES: usize = 100;

/// The next cursor to follow after `pages` pages of `method`, or why not: the page cap is
/// reached, or the upstream repeated a cursor it gave before (it would loop until the timeout).
fn follow(
    seen: &mut HashSet<String>,
    pages: usize,
    method: &str,
    cursor: String,
) -> Result<String, String> {
    if pages >= MAX_LIST_PAGES {
        return Err(format!(
            "the upstream's {method} has more than {MAX_LIST_PAGES} pages, the most the proxy \
             follows; the upstream should answer larger pages"
        ));
    }
    if !seen.insert(cursor.clone()) {
        return Err(format!(
            "the upstream's {method} gave cursor {cursor:?} twice; its pages would never end"
        ));
    }
    Ok(cursor)
}

/// A list page asking for input (`resultType: "input_required"`, SEP-2322) is not MCP for a
/// list (R-PRX-32): the request declared no input capability, and a list has no items then.
fn not_an_input_request(method: &str, page: &Value) -> Result<(), String> {
    if !durable_mcp_contract::input::is_input_required(page) {
        return Ok(());
    }
    Err(format!(
        "the upstream answered {method} with an input request (resultType \"input_required\") \
         although the request declared no input capability; a list cannot ask for input"
    ))
}

impl UpstreamClient {
    /// The capabilities the upstream declared at `initialize` that the feature operations
    /// serve (`resources`, `prompts`, `completions`), as it wrote them.
    pub async fn served_capabilities(
        &self,
        timeout: Duration,
    ) -> Result<Map<String, Value>, UpstreamError> {
        let conn = self.connect_within(timeout).await?;
        let declared = conn
            .peer()
            .peer_info()
            .map(|info| to_json(&info.capabilities))
            .transpose()
            .map_err(|reason| self.protocol(reason))?
            .unwrap_or_default();
        Ok(served_capabilities(&declared))
    }

    /// One request (`method`, `params` as the caller wrote them), its result as written.
    pub async fn request_as_written(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        let conn = self.connect_within(timeout).await?;
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        options.meta = super::era::feature_request_meta(super::era::Upstream::of(conn.peer()));
        let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
        self.send_as_written(&conn, request, options).await
    }

    /// Sends `request` on `conn`; its answer as written (else rmcp's typed view of it).
    pub(super) async fn send_as_written(
        &self,
        conn: &super::Connection,
        request: ClientRequest,
        options: PeerRequestOptions,
    ) -> Result<Value, UpstreamError> {
        let handle = conn
            .peer()
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.failed(conn, e))?;
        let id = handle.id.clone();
        let answered = handle
            .await_response()
            .await
            .map_err(|e| self.failed(conn, e))?;
        match conn.service().written.take(&id) {
            Some(written) => Ok(written),
            None => to_json(&answered).map_err(|reason| self.protocol(reason)),
        }
    }

    /// Every page of a list request, folded into one result (the first page as written,
    /// every page's `items`, no `nextCursor`).
    pub async fn list_all_pages(
        &self,
        method: &str,
        items: &str,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pages = Vec::new();
        let mut params = Map::new();
        let mut seen = HashSet::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let page = self
                .request_as_written(method, Value::Object(params.clone()), left)
                .await?;
            not_an_input_request(method, &page).map_err(|reason| self.protocol(reason))?;
            let next = next_cursor(&page);
            pages.push(page);
            match next {
                Some(cursor) => {
                    let cursor = follow(&mut seen, pages.len(), method, cursor)
                        .map_err(|reason| self.protocol(reason))?;
                    params.insert("cursor".into(), Value::String(cursor))
                }
                None => return Ok(fold_pages(items, pages)),
            };
        }
    }

    pub(super) async fn connect_within(
        &self,
        timeout: Duration,
    ) -> Result<super::Connection, UpstreamError> {
        tokio::time::timeout(timeout, self.connect())
            .await
            .map_err(|_| UpstreamError::Connect {
                service: self.service.clone(),
                reason: format!("no MCP connection within {timeout:?} (still trying)"),
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_followed_up_to_the_page_cap_and_never_twice() {
        let mut seen = HashSet::new();
        assert_eq!(follow(&mut seen, 1, "m", "a".into()).unwrap(), "a");
        assert_eq!(follow(&mut seen, 2, "m", "b".into()).unwrap(), "b");
        let again = follow(&mut seen, 3, "resources/list", "a".into()).unwrap_err();
        assert!(again.contains("\"a\" twice"), "{again}");
        let cap = follow(
            &mut HashSet::new(),
            MAX_LIST_PAGES,
            "prompts/list",
            "z".into(),
        );
        assert!(cap.unwrap_err().contains("more than 100 pages"));
        assert!(follow(&mut HashSet::new(), MAX_LIST_PAGES - 1, "m", "z".into()).is_ok());
    }

    #[test]
    fn a_list_page_asking_for_input_is_a_protocol_error() {
        let asked = serde_json::json!({"resultType": "input_required",
            "inputRequests": {"who": {"method": "elicitation/create", "params": {}}}});
        let error = not_an_input_request("prompts/list", &asked).unwrap_err();
        assert!(
            error.contains("prompts/list") && error.contains("input_required"),
            "{error}"
        );
        let complete = serde_json::json!({"prompts": [], "resultType": "complete"});
        assert_eq!(not_an_input_request("prompts/list", &complete), Ok(()));
        assert_eq!(
            not_an_input_request("resources/list", &serde_json::json!({})),
            Ok(())
        );
    }
}

/// Property tests of an upstream's list pages (R-PRX-32, R-CON-51): whatever cursors it gives,
/// the proxy follows each once and at most [`MAX_LIST_PAGES`] pages; a page of any shape is a
/// page or refused, never a panic.
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::answer;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_cursors_are_followed_once_each_and_at_most_the_page_cap(
            cursors in prop::collection::vec(prop_oneof!["[ab]{0,3}", "\\PC{0,10}"], 0..150),
        ) {
            let mut seen = HashSet::new();
            let mut followed = Vec::new();
            for (pages, cursor) in cursors.into_iter().enumerate() {
                match follow(&mut seen, pages + 1, "tools/list", cursor.clone()) {
                    Ok(next) => {
                        prop_assert_eq!(&next, &cursor);
                        prop_assert!(!followed.contains(&next));
                        followed.push(next);
                    }
                    Err(why) => {
                        prop_assert!(why.contains("tools/list"));
                        break;
                    }
                }
            }
            prop_assert!(followed.len() < MAX_LIST_PAGES);
        }

        #[test]
        fn a_page_of_any_shape_is_a_page_or_refused(page in answer()) {
            if let Err(why) = not_an_input_request("resources/list", &page) {
                prop_assert!(why.contains("resources/list"));
            }
        }
    }
}
