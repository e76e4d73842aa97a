//! Certificates of a PEM file, trusted instead of Mozilla's roots by the clients halflife
//! runs: a remote object store's (`RS_REMOTE_<NAME>_CA_FILE`) and a replication
//! destination's (`RS_REPLICATION_CA_PATH`).

use std::path::Path;

use ureq::tls::{Certificate, PemItem};

use crate::error::{Error, Result};

/// The certificates of the PEM file `path`; `setting` names where the path came from in
/// the error when the file cannot be read or holds none.
pub fn read_ca_certificates(path: &Path, setting: &str) -> Result<Vec<Certificate<'static>>> {
    let bad = |why: String| Error::unprocessable(format!("{setting} '{}': {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certificates.push(c),
            Ok(_) => {} // keys and the like have no business here; skipped
            Err(e) => return Err(bad(format!("not PEM: {e}"))),
        }
    }
    if certificates.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(certificates)
}
