//! Reading the created tokens' file (`.tokens`), for the server that owns it and for a
//! replica that follows it (`docs/high-availability.md`): a replica writes nothing, so a
//! file that does not parse is only reported, and it reads the file again as the writer
//! changes it.

use std::path::Path;

use super::{StoredToken, TokenRepository};
use crate::error::{Error, Result};
use crate::timefmt::now_micros;

/// The tokens stored at `path`, and the stored values that do not load (kept in the file
/// as they are, never accepted). A file that does not parse is set aside when
/// `set_aside` (only the provisioned tokens work until it is repaired), and otherwise
/// read as no token.
pub(super) fn read(
    path: &Path,
    set_aside: bool,
) -> Result<(Vec<StoredToken>, Vec<serde_json::Value>)> {
    let stored: Vec<serde_json::Value> = match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(list) => list,
            Err(e) if set_aside => {
                // Set aside, not overwritten: only the init token works until the
                // file is repaired and put back.
                let aside = path.with_extension(format!("damaged-{}", now_micros()));
                std::fs::rename(path, &aside)
                    .map_err(|e| Error::io(format!("setting {} aside", path.display()), e))?;
                log::error!(
                    "{} does not parse ({e}); set aside as {}: its tokens are not accepted",
                    path.display(),
                    aside.display()
                );
                Vec::new()
            }
            Err(e) => {
                log::error!(
                    "{} does not parse ({e}): its tokens are not accepted here",
                    path.display()
                );
                Vec::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let mut tokens: Vec<StoredToken> = Vec::new();
    let mut unreadable = Vec::new();
    for value in stored {
        match serde_json::from_value::<StoredToken>(value.clone()) {
            Ok(token) => tokens.push(token),
            Err(e) => {
                log::error!(
                    "a token stored in {} does not load ({e}): it is kept in the file, disabled",
                    path.display()
                );
                unreadable.push(value);
            }
        }
    }
    Ok((tokens, unreadable))
}

impl TokenRepository {
    /// A replica's look at the tokens' file: the tokens its writer created, changed or
    /// removed since replace the ones known (the last uses seen here are kept).
    pub fn follow(&self) -> Result<()> {
        let (tokens, _) = read(&self.path, false)?;
        let mut state = self.lock();
        state.tokens = tokens.into_iter().map(|t| (t.name.clone(), t)).collect();
        Ok(())
    }
}
