//! The server under test and how to reach it directly (without the durable path).

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use durable_mcp::proxy::TransportConfig;
use rmcp::{
    RoleClient, ServiceExt,
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

/// The server under test.
#[derive(Debug, Clone)]
pub enum Upstream {
    Stdio {
        command: String,
        args: Vec<String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// A direct rmcp client of the upstream.
pub type DirectClient = RunningService<RoleClient, ()>;

impl Upstream {
    /// `--upstream-stdio "CMD ARGS"`, split as a POSIX shell would (quotes and backslashes),
    /// without running a shell: `"node 'my dir/server.js' --flag"` is three words.
    pub fn stdio(command_line: &str) -> anyhow::Result<Self> {
        let words = shlex::split(command_line).with_context(|| {
            format!("--upstream-stdio {command_line:?}: unbalanced quotes or a trailing backslash")
        })?;
        let mut words = words.into_iter();
        let command = words.next().context("--upstream-stdio needs a command")?;
        Ok(Upstream::Stdio {
            command,
            args: words.collect(),
        })
    }

    /// `--upstream-http URL --header K:V ...`.
    pub fn http(url: &str, headers: &[String]) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        for h in headers {
            let (k, v) = h
                .split_once(':')
                .with_context(|| format!("--header {h:?} is not NAME:VALUE"))?;
            map.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        Ok(Upstream::Http {
            url: url.to_owned(),
            headers: map,
        })
    }

    /// One line for the report. Header values may be secrets: names only.
    pub fn describe(&self) -> String {
        match self {
            Upstream::Stdio { command, args } => {
                let words: Vec<String> = std::iter::once(command)
                    .chain(args)
                    .map(|w| {
                        shlex::try_quote(w)
                            .map(|q| q.into_owned())
                            .unwrap_or_else(|_| w.clone())
                    })
                    .collect();
                format!("stdio: {}", words.join(" "))
            }
            Upstream::Http { url, headers } => {
                let names: Vec<_> = headers.keys().cloned().collect();
                if names.is_empty() {
                    format!("http: {url}")
                } else {
                    format!("http: {url} (headers: {})", names.join(", "))
                }
            }
        }
    }

    /// How the proxy reaches it.
    pub fn transport(&self) -> anyhow::Result<TransportConfig> {
        Ok(match self {
            // The server under test gets the environment its direct run gets, so that the
            // two runs of a tool that reads it (server-everything's `get-env`) compare equal.
            Upstream::Stdio { command, args } => TransportConfig::Stdio {
                command: command.clone(),
                args: args.clone(),
                env: BTreeMap::new(),
                cwd: None,
                inherit_env: true,
                discover_wait: None,
            },
            Upstream::Http { url, headers } => TransportConfig::Http {
                url: url.parse().with_context(|| format!("URL {url:?}"))?,
                headers: headers.clone(),
                unavailable_means_not_run: false,
                oauth: None,
            },
        })
    }

    /// Connects an rmcp client directly.
    pub async fn connect(&self) -> anyhow::Result<DirectClient> {
        match self {
            Upstream::Stdio { command, args } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args);
                let (transport, _) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .with_context(|| format!("spawning {command}"))?;
                Ok(().serve(transport).await?)
            }
            Upstream::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let name = axum::http::HeaderName::try_from(k.as_str())
                        .with_context(|| format!("header name {k:?}"))?;
                    let value = axum::http::HeaderValue::try_from(v.as_str())
                        .map_err(|_| anyhow::anyhow!("header {k} has an invalid value"))?;
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                Ok(
                    ().serve(StreamableHttpClientTransport::from_config(config))
                        .await?,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_command_lines_split_like_a_shell() {
        let Upstream::Stdio { command, args } =
            Upstream::stdio("  npx -y  @modelcontextprotocol/server-everything ").unwrap()
        else {
            panic!()
        };
        assert_eq!(command, "npx");
        assert_eq!(args, ["-y", "@modelcontextprotocol/server-everything"]);
        let Upstream::Stdio { command, args } =
            Upstream::stdio(r#"node 'my dir/server.js' --name "a b" c\ d"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(command, "node");
        assert_eq!(args, ["my dir/server.js", "--name", "a b", "c d"]);
        assert!(Upstream::stdio("   ").is_err());
        let e = Upstream::stdio("node 'unclosed").unwrap_err().to_string();
        assert!(e.contains("unbalanced quotes"), "{e}");
        // The report quotes what needs it, so the line can be pasted back.
        let u = Upstream::stdio("node 'my dir/server.js'").unwrap();
        assert_eq!(u.describe(), "stdio: node 'my dir/server.js'");
    }

    #[test]
    fn headers_parse_and_values_stay_out_of_the_report() {
        let u = Upstream::http("http://x/mcp", &["Authorization: Bearer a:b".into()]).unwrap();
        let Upstream::Http { headers, .. } = &u else {
            panic!()
        };
        assert_eq!(headers["Authorization"], "Bearer a:b");
        assert!(!u.describe().contains("Bearer"), "{}", u.describe());
        assert!(Upstream::http("http://x", &["nocolon".into()]).is_err());
    }
}
