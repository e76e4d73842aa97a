//! What a connection speaks over its socket: plain HTTP, or HTTPS through rustls
//! (`RS_CERT_PATH` / `RS_CERT_KEY_PATH`, as ReductStore serves it itself).
//!
//! Both are read and written the same way, blocking (a handler thread, with timeouts) or
//! not (the poller). With TLS, the handshake runs inside the first reads, on whichever
//! side holds the connection. rustls can hold decrypted bytes the socket no longer
//! signals, so whoever hands a connection to the poller drains them first
//! ([`Transport::drain_decrypted`]) and the poller's reads go on while any are left
//! ([`Transport::holds_decrypted`]): a request must never wait for a readiness event
//! that will not come.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::error::{Error, Result};

/// A connection's byte stream.
pub enum Transport {
    /// HTTP.
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Transport {
    /// Wraps an accepted socket: TLS when the server has a certificate.
    pub fn accept(socket: TcpStream, tls: Option<&Arc<ServerConfig>>) -> io::Result<Transport> {
        Ok(match tls {
            None => Transport::Plain(socket),
            Some(config) => {
                let session = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
                Transport::Tls(Box::new(StreamOwned::new(session, socket)))
            }
        })
    }

    /// The socket underneath.
    pub fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }

    /// See [`TcpStream::set_nonblocking`].
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket().set_nonblocking(on)
    }

    /// See [`TcpStream::set_read_timeout`].
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    /// See [`TcpStream::set_write_timeout`].
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_write_timeout(timeout)
    }

    /// Ends the sending side (with TLS, after a `close_notify`, best effort).
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        if let Transport::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.conn.complete_io(&mut t.sock);
        }
        self.socket().shutdown(Shutdown::Write)
    }

    /// Whether rustls holds decrypted bytes not read yet.
    pub fn holds_decrypted(&mut self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t
                .conn
                .process_new_packets()
                .is_ok_and(|state| state.plaintext_bytes_to_read() > 0),
        }
    }

    /// Appends to `out` every decrypted byte rustls holds, without reading the socket.
    pub fn drain_decrypted(&mut self, out: &mut Vec<u8>) {
        if let Transport::Tls(t) = self {
            let mut chunk = [0u8; 16 << 10];
            while let Ok(n) = t.conn.reader().read(&mut chunk) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

impl Read for Transport {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(out),
            Transport::Tls(t) => t.read(out),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(bytes),
            Transport::Tls(t) => t.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.flush(),
        }
    }
}

impl AsFd for Transport {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket().as_fd()
    }
}

impl AsRawFd for Transport {
    fn as_raw_fd(&self) -> RawFd {
        self.socket().as_raw_fd()
    }
}

/// The server's TLS settings from a PEM certificate chain and its PEM private key. Any
/// problem stops the start (serving plain HTTP where HTTPS was asked for would expose
/// every token): the message names the file and what is wrong with it.
pub fn server_tls(cert_path: &Path, key_path: &Path) -> Result<Arc<ServerConfig>> {
    let bad = |what: &str, path: &Path, why: String| {
        Error::unprocessable(format!("{what} '{}': {why}", path.display()))
    };
    let pem =
        std::fs::read(cert_path).map_err(|e| bad("RS_CERT_PATH", cert_path, e.to_string()))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad("RS_CERT_PATH", cert_path, format!("not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(bad(
            "RS_CERT_PATH",
            cert_path,
            "holds no PEM certificate".into(),
        ));
    }
    let pem =
        std::fs::read(key_path).map_err(|e| bad("RS_CERT_KEY_PATH", key_path, e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            "RS_CERT_KEY_PATH",
            key_path,
            format!("no PEM private key: {e}"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            Error::unprocessable(format!(
                "RS_CERT_PATH '{}' and RS_CERT_KEY_PATH '{}' do not make a TLS identity: {e}",
                cert_path.display(),
                key_path.display()
            ))
        })?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

    #[test]
    fn a_certificate_and_its_key_make_a_config_and_mistakes_are_named() {
        let cert = Path::new(FIXTURES).join("server.pem");
        let key = Path::new(FIXTURES).join("server.key");
        assert!(server_tls(&cert, &key).is_ok());
        let missing = Path::new(FIXTURES).join("nope.pem");
        let e = server_tls(&missing, &key).expect_err("refused");
        assert!(e.message().starts_with("RS_CERT_PATH '"), "{e}");
        let e = server_tls(&key, &key).expect_err("refused");
        assert!(e.message().contains("holds no PEM certificate"), "{e}");
        let e = server_tls(&cert, &cert).expect_err("refused");
        assert!(e.message().starts_with("RS_CERT_KEY_PATH '"), "{e}");
    }
}
