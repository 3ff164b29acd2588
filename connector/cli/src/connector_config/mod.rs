//! `durable-mcp-connector`'s flags: [`ConnectorFlags`] as clap reads them ([`flags`]), with the
//! value parsers in [`values`].

pub mod flags;
pub mod values;

pub use flags::{ConnectorFlags, Transport};
