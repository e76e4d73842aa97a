//! TLS to a replication destination (`https://` hosts): rustls, with Mozilla's root
//! certificates by default, the certificates of a PEM file instead
//! (`RS_REPLICATION_CA_PATH`), or no verification at all (`RS_REPLICATION_VERIFY_SSL=false`,
//! as ReductStore offers; the connection is then encrypted but not authenticated).

use std::path::Path;
use std::sync::Arc;

use ureq::tls::{RootCerts, TlsConfig};

use crate::error::Result;
use crate::storage::remote::ca::read_ca_certificates;

/// How the senders check a destination's certificate.
#[derive(Debug, Clone)]
pub struct ReplicationTls {
    roots: RootCerts,
    verify: bool,
}

impl Default for ReplicationTls {
    /// Mozilla's roots, verified.
    fn default() -> Self {
        ReplicationTls {
            roots: RootCerts::WebPki,
            verify: true,
        }
    }
}

impl ReplicationTls {
    /// Verifies certificates (or not, with `verify` false) against the certificates of
    /// the PEM file `ca_path`, or Mozilla's roots when there is none. A file that cannot
    /// be read or holds no certificate is an error naming it.
    pub fn new(verify: bool, ca_path: Option<&Path>) -> Result<Self> {
        Self::for_setting(verify, ca_path, "RS_REPLICATION_CA_PATH")
    }

    /// [`ReplicationTls::new`] for another client, its errors naming `setting` (the
    /// variable that gave `ca_path`).
    pub fn for_setting(verify: bool, ca_path: Option<&Path>, setting: &str) -> Result<Self> {
        let roots = match ca_path {
            None => RootCerts::WebPki,
            Some(path) => RootCerts::Specific(Arc::new(read_ca_certificates(path, setting)?)),
        };
        Ok(ReplicationTls { roots, verify })
    }

    /// The client's TLS settings.
    pub fn config(&self) -> TlsConfig {
        TlsConfig::builder()
            .root_certs(self.roots.clone())
            .disable_verification(!self.verify)
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let e = ReplicationTls::new(true, Some(&missing)).expect_err("missing");
        assert!(e.message().contains("missing.pem"), "{}", e.message());
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").expect("write");
        let e = ReplicationTls::new(true, Some(&empty)).expect_err("empty");
        assert!(
            e.message().contains("holds no PEM certificate"),
            "{}",
            e.message()
        );
        let good = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/ca.pem");
        assert!(ReplicationTls::new(true, Some(Path::new(good))).is_ok());
    }
}
