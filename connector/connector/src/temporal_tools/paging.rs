//! Paging: reading a Temporal listing page by page, and the `limit` and `skip` of the list
//! tools.

use std::future::Future;

use serde_json::Value;

use super::{
    args::Args,
    catalog::{Input, Output, int, t},
    error::ToolError,
};

/// The largest page asked of Temporal.
const MAX_PAGE: usize = 1000;

/// Reads pages until `want` items are found or the last page is read. `page` gets the page
/// token and how many items to ask for, and answers the page's items and the next token
/// (empty after the last page).
pub async fn collect<T, F, Fut>(want: usize, mut page: F) -> Result<Vec<T>, ToolError>
where
    F: FnMut(Vec<u8>, i32) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Vec<u8>), ToolError>>,
{
    let mut found = Vec::new();
    let mut token = Vec::new();
    loop {
        let size = (want - found.len()).min(MAX_PAGE) as i32;
        let (items, next) = page(token, size).await?;
        found.extend(items);
        token = next;
        if token.is_empty() || found.len() >= want {
            return Ok(found);
        }
    }
}

/// A list tool's `limit` and `skip`.
pub struct Paging {
    pub limit: usize,
    pub skip: usize,
}

impl Paging {
    pub fn from_args(args: &Args<'_>) -> Result<Self, ToolError> {
        Ok(Self {
            limit: args.int("limit", 10, 1, 100)? as usize,
            skip: args.int("skip", 0, 0, 10_000)? as usize,
        })
    }

    /// The `limit` and `skip` inputs; `skip` says what it skips.
    pub fn inputs(skip: &str) -> Vec<Input> {
        vec![
            ("limit", int("How many to return", 1, 100, 10), false),
            ("skip", int(skip, 0, 10_000, 0), false),
        ]
    }

    /// The output fields after the listed items.
    pub fn outputs() -> Vec<Output> {
        vec![("count", t("integer")), ("has_more", t("boolean"))]
    }

    /// How many items to read: one more than asked, to know whether there are more.
    pub fn want(&self) -> usize {
        self.skip + self.limit + 1
    }

    /// The asked page of `found`, and whether more follow it.
    pub fn page(&self, found: Vec<Value>) -> (Vec<Value>, bool) {
        let has_more = found.len() > self.skip + self.limit;
        let page = found.into_iter().skip(self.skip).take(self.limit).collect();
        (page, has_more)
    }

    /// The headline's note on the next page, empty when there is none.
    pub fn next(&self, has_more: bool) -> String {
        if has_more {
            format!("; more after skip={}", self.skip + self.limit)
        } else {
            String::new()
        }
    }
}
