//! The runner's own fault-injecting TCP relay: the proxy reaches its HTTP upstream through it,
//! and the nemesis stalls, resets or blackholes what crosses it. Loopback only.
//!
//! - **stall**: nothing crosses, either way, on old or new connections, until it heals; then
//!   everything held is delivered (a paused path: TCP retransmits what it sent, late).
//! - **reset**: every open connection is reset (RST) at once, and new ones are reset as they
//!   come, until it heals (a middlebox or the upstream's host dropping its connections).
//! - **blackhole**: what crosses is read and thrown away, either way; new connections are
//!   accepted and swallowed. At the heal every connection that lost bytes is reset: its stream
//!   has a hole and cannot go on (the peer answering a segment of a connection it lost).

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// What the relay does with what crosses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Stall,
    Reset,
    Blackhole,
}

/// The relay's state, shared by its connections.
struct Shared {
    mode: watch::Sender<Mode>,
    /// Bumped by every reset and every heal of a blackhole: connections of an older generation
    /// that must go (all of them on a reset, those that lost bytes on a heal) are reset.
    resets: watch::Sender<u64>,
    /// Connections that lost bytes to a blackhole, by the generation that resets them.
    tainted_at: AtomicU64,
    open: AtomicUsize,
}

/// A relay listening on a loopback port, forwarding to `target`; stops when dropped.
pub struct Relay {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Listens on a free loopback port in front of `target` (a loopback address).
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        anyhow::ensure!(
            target.ip().is_loopback(),
            "the relay forwards to loopback only, not {target}"
        );
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            mode: watch::Sender::new(Mode::Pass),
            resets: watch::Sender::new(0),
            tainted_at: AtomicU64::new(u64::MAX),
            open: AtomicUsize::new(0),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let shared = accepting.clone();
                tokio::spawn(async move { serve(shared, inbound, target).await });
            }
        });
        Ok(Self {
            addr,
            shared,
            accept,
        })
    }

    /// Turns a fault on (or heals it with [`Mode::Pass`]).
    pub fn set(&self, mode: Mode) {
        let was = self.shared.mode.send_replace(mode);
        if mode == Mode::Reset {
            self.shared.resets.send_modify(|g| *g += 1);
        }
        if was == Mode::Blackhole && mode != Mode::Blackhole {
            // Every connection that lost bytes is reset now.
            let next = *self.shared.resets.borrow() + 1;
            self.shared.tainted_at.store(next, Ordering::SeqCst);
            self.shared.resets.send_replace(next);
        }
    }

    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Connections open through the relay now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.resets.send_modify(|g| *g += 1);
        self.shared.mode.send_replace(Mode::Reset);
    }
}

/// One relayed connection, until either side closes or a reset ends it.
async fn serve(shared: Arc<Shared>, inbound: TcpStream, target: SocketAddr) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _open = Guard(&shared.open);
    let mut mode = shared.mode.subscribe();
    let mut resets = shared.resets.subscribe();
    resets.borrow_and_update();
    // A connection arriving during a fault waits for it to pass, or is reset or swallowed.
    let outbound = loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Reset => return reset(inbound),
            Mode::Blackhole => return swallow(inbound, mode).await,
            Mode::Pass => break TcpStream::connect(target).await,
            Mode::Stall => {}
        }
        if mode.changed().await.is_err() {
            return;
        }
    };
    let Ok(outbound) = outbound else {
        return reset(inbound);
    };
    let tainted = std::sync::atomic::AtomicBool::new(false);
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let up = pump(&shared, &mut in_read, &mut out_write, &tainted);
    let down = pump(&shared, &mut out_read, &mut in_write, &tainted);
    let must_reset = async {
        loop {
            if resets.changed().await.is_err() {
                return;
            }
            let generation = *resets.borrow_and_update();
            let healed_blackhole = shared.tainted_at.load(Ordering::SeqCst) == generation;
            if !healed_blackhole || tainted.load(Ordering::SeqCst) {
                return;
            }
        }
    };
    let cut = tokio::select! {
        _ = async { tokio::join!(up, down) } => false,
        () = must_reset => true,
    };
    if let (true, Ok(inbound), Ok(outbound)) =
        (cut, in_read.reunite(in_write), out_read.reunite(out_write))
    {
        reset(outbound);
        reset(inbound);
    }
}

/// A connection that came during a blackhole: what it sends is thrown away until the heal,
/// which resets it.
async fn swallow(mut inbound: TcpStream, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = inbound.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { return },
            changed = mode.changed() => if changed.is_err() || *mode.borrow() != Mode::Blackhole {
                return reset(inbound);
            },
        }
    }
}

/// Copies `from` to `to` chunk by chunk, each chunk as the relay's mode says when it arrives;
/// ends when `from` closes or a write fails.
async fn pump(
    shared: &Shared,
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    tainted: &std::sync::atomic::AtomicBool,
) {
    let mut mode = shared.mode.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        loop {
            let now = *mode.borrow_and_update();
            match now {
                Mode::Pass => {
                    if to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    break;
                }
                Mode::Blackhole => {
                    tainted.store(true, Ordering::SeqCst);
                    break;
                }
                // A reset ends the connection from `serve`; a stall holds the chunk.
                Mode::Stall | Mode::Reset => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Closes `stream` with a reset (RST), not a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Counts a connection open while it lives.
struct Guard<'a>(&'a AtomicUsize);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An echo server on loopback: answers every byte it reads.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, what: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(what).await?;
        let mut got = vec![0u8; what.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    const QUIET: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn it_relays_and_a_stall_holds_bytes_until_it_heals() {
        let relay = Relay::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(relay.addr).await.unwrap();
        assert_eq!(round_trip(&mut s, b"one").await.unwrap(), b"one");
        relay.set(Mode::Stall);
        s.write_all(b"two").await.unwrap();
        let mut got = [0u8; 3];
        let held = tokio::time::timeout(QUIET, s.read_exact(&mut got)).await;
        assert!(held.is_err(), "a stalled relay delivered {got:?}");
        relay.set(Mode::Pass);
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"two");
        assert_eq!(relay.open_connections(), 1);
    }

    #[tokio::test]
    async fn a_reset_cuts_open_connections_and_refuses_new_ones_until_it_heals() {
        let relay = Relay::start(echo_server().await).await.unwrap();
        let mut old = TcpStream::connect(relay.addr).await.unwrap();
        round_trip(&mut old, b"x").await.unwrap();
        relay.set(Mode::Reset);
        let mut buf = [0u8; 1];
        let cut = old.read(&mut buf).await;
        assert!(
            matches!(&cut, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{cut:?}"
        );
        let mut new = TcpStream::connect(relay.addr).await.unwrap();
        assert!(round_trip(&mut new, b"y").await.is_err());
        relay.set(Mode::Pass);
        let mut healed = TcpStream::connect(relay.addr).await.unwrap();
        assert_eq!(round_trip(&mut healed, b"z").await.unwrap(), b"z");
    }

    #[tokio::test]
    async fn a_blackhole_loses_bytes_and_its_heal_resets_what_lost_them() {
        let relay = Relay::start(echo_server().await).await.unwrap();
        let mut hit = TcpStream::connect(relay.addr).await.unwrap();
        let mut spared = TcpStream::connect(relay.addr).await.unwrap();
        round_trip(&mut hit, b"a").await.unwrap();
        round_trip(&mut spared, b"b").await.unwrap();
        relay.set(Mode::Blackhole);
        hit.write_all(b"lost").await.unwrap();
        let mut got = [0u8; 4];
        let nothing = tokio::time::timeout(QUIET, hit.read_exact(&mut got)).await;
        assert!(nothing.is_err(), "a blackhole delivered {got:?}");
        relay.set(Mode::Pass);
        let cut = hit.read(&mut got).await;
        assert!(
            matches!(&cut, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{cut:?}"
        );
        // A connection that lost nothing goes on.
        assert_eq!(round_trip(&mut spared, b"c").await.unwrap(), b"c");
    }

    #[tokio::test]
    async fn it_forwards_to_loopback_only() {
        let err = Relay::start("192.0.2.1:80".parse().unwrap())
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("loopback"), "{err}");
    }
}
