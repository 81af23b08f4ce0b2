//! Connections within one process, through memory instead of the loopback network.
//!
//! A simulated fleet runs thousands of API servers and their clients (klusterlets, work
//! agents) in one process. Over TCP every connection between them holds two of the process's
//! open files, one per end, and a process may hold only so many (this machine's hard limit is
//! 20 000, about 2 900 simulated clusters). A server started with
//! [`crate::Options::in_process_connections`] also accepts connections from its own process
//! through an in-memory pipe: clients made by [`crate::client::Transports`] in that process
//! reach it that way, while other processes (the real addon binaries, kubectl) still use its
//! TCP port. The bytes are the same (TLS, then HTTP/2); only the carrier differs. Faults hold
//! as over TCP: while the server is down (an outage, or stopped) nothing is accepted here and
//! a client falls back to its TCP port, which refuses it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};

use tokio::io::DuplexStream;
use tokio::sync::mpsc;

/// Bytes an in-memory connection buffers each way before its writer waits for the reader.
const BUFFER: usize = 256 * 1024;

type Accept = mpsc::UnboundedSender<DuplexStream>;

/// The servers of this process that accept in-process connections now, by address.
static ACCEPTING: LazyLock<Mutex<HashMap<SocketAddr, Arc<Accept>>>> = LazyLock::new(Mutex::default);

fn accepting() -> std::sync::MutexGuard<'static, HashMap<SocketAddr, Arc<Accept>>> {
    ACCEPTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A server's in-process door, open while this value lives: connections to its address from
/// this process arrive on [`Door::accept`].
pub(crate) struct Door {
    addr: SocketAddr,
    sender: Arc<Accept>,
    connections: mpsc::UnboundedReceiver<DuplexStream>,
}

impl Door {
    /// Opens the door of the server at `addr` (replacing one left by an earlier server there).
    pub(crate) fn open(addr: SocketAddr) -> Self {
        let (tx, connections) = mpsc::unbounded_channel();
        let sender = Arc::new(tx);
        accepting().insert(addr, sender.clone());
        Self {
            addr,
            sender,
            connections,
        }
    }

    /// The next connection made to this server from this process.
    pub(crate) async fn accept(&mut self) -> Option<DuplexStream> {
        self.connections.recv().await
    }
}

impl Drop for Door {
    /// Closed: connections not accepted yet end (their clients read the end of the stream),
    /// and new ones go to the TCP port.
    fn drop(&mut self) {
        let mut open = accepting();
        if open
            .get(&self.addr)
            .is_some_and(|s| Arc::ptr_eq(s, &self.sender))
        {
            open.remove(&self.addr);
        }
    }
}

/// A connection to the server at `addr` through memory, if it is in this process and
/// accepting; `None`: connect over TCP.
pub(crate) fn connect(addr: SocketAddr) -> Option<DuplexStream> {
    let sender = accepting().get(&addr).cloned()?;
    let (client, server) = tokio::io::duplex(BUFFER);
    sender.send(server).ok()?;
    Some(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_door_takes_connections_while_it_is_open_and_only_then() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        assert!(connect(addr).is_none(), "no server: TCP");
        let mut door = Door::open(addr);
        let mut client = connect(addr).expect("an open door takes the connection");
        let mut server = door.accept().await.expect("accepted");
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // A connection not accepted before the door closes ends.
        let mut waiting = connect(addr).expect("still open");
        drop(door);
        assert!(connect(addr).is_none(), "closed: TCP again");
        let mut rest = Vec::new();
        assert_eq!(waiting.read_to_end(&mut rest).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_closed_door_leaves_a_newer_one_at_its_address_open() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 2));
        let old = Door::open(addr);
        let _new = Door::open(addr);
        drop(old);
        assert!(connect(addr).is_some());
    }
}
