//! Free local ports for one dev server.
//!
//! The dev server needs four ports. We let the kernel pick them (bind port 0), then release them
//! just before the server binds them. That leaves a small window in which another process can
//! grab one, so the process backend retries the whole start with fresh ports when the server
//! reports an address in use.

use std::{collections::HashSet, io, net::TcpListener};

/// The ports one dev server listens on, all on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ports {
    /// Frontend gRPC: what clients connect to.
    pub grpc: u16,
    /// Web UI. Unused with `--headless`, but passed so the CLI's default (grpc + 1000) cannot
    /// collide with another server's port.
    pub ui: u16,
    /// HTTP API.
    pub http: u16,
    /// Prometheus `/metrics`.
    pub metrics: u16,
}

impl Ports {
    /// Picks four distinct free ports. All listeners are held until every port is chosen, so the
    /// kernel cannot hand out the same port twice.
    pub fn pick() -> io::Result<Self> {
        Self::pick_with(None)
    }

    /// Like [`Ports::pick`], with the gRPC port fixed where given (the user's `--port`); the
    /// others are picked distinct from it.
    pub fn pick_with(grpc: Option<u16>) -> io::Result<Self> {
        let needed = if grpc.is_some() { 3 } else { 4 };
        let mut held = Vec::with_capacity(needed);
        let mut seen: HashSet<u16> = grpc.into_iter().collect();
        while held.len() < needed {
            let listener = TcpListener::bind(("127.0.0.1", 0))?;
            let port = listener.local_addr()?.port();
            if seen.insert(port) {
                held.push((listener, port));
            }
        }
        let mut free = held.iter().map(|(_, p)| *p);
        let mut next = || free.next().expect("enough ports were picked");
        Ok(Self {
            grpc: grpc.unwrap_or_else(&mut next),
            ui: next(),
            http: next(),
            metrics: next(),
        })
        // `held` drops here, releasing the ports for the server.
    }
}

/// Whether server output says a listen address was taken (Go: "address already in use").
pub(crate) fn mentions_port_in_use(log: &str) -> bool {
    let lower = log.to_ascii_lowercase();
    lower.contains("address already in use") || lower.contains("bind: address in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_grpc_port_is_kept_and_the_others_differ_from_it() {
        let p = Ports::pick_with(Some(7233)).unwrap();
        assert_eq!(p.grpc, 7233);
        let all: HashSet<u16> = [p.grpc, p.ui, p.http, p.metrics].into();
        assert_eq!(all.len(), 4, "{p:?}");
    }

    #[test]
    fn picks_four_distinct_nonzero_ports() {
        let p = Ports::pick().unwrap();
        let all = [p.grpc, p.ui, p.http, p.metrics];
        assert!(all.iter().all(|&x| x != 0));
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), 4);
        // Released again: each can be bound right away.
        for port in all {
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn recognises_port_conflicts() {
        assert!(mentions_port_in_use(
            "listen tcp 127.0.0.1:7233: bind: address already in use"
        ));
        assert!(!mentions_port_in_use(
            "level=WARN msg=\"Failed to poll for task.\""
        ));
    }
}
