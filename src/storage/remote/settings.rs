//! How a remote object store is configured: `--remote NAME=URL` on the command line, and
//! `RS_REMOTE_<NAME>_*` variables that complete or replace it. The secret key is read from
//! a file (`RS_REMOTE_<NAME>_SECRET_ACCESS_KEY_FILE`), never from the command line, and is
//! kept in a type whose `Debug` hides it, so no log line or error can carry it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// A secret that prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for signing only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// One remote as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSettings {
    /// The name policies use (`"remote": "NAME"`), as given (compared without case).
    pub name: String,
    /// `http://` or `https://` host and port of the S3 API.
    pub endpoint: String,
    /// The bucket on the object store.
    pub bucket: String,
    /// Prefix of every object halflife writes (no leading or trailing `/`).
    pub prefix: String,
    /// The region requests are signed for.
    pub region: String,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: Secret,
    /// Path-style addressing (`host/bucket/key`) rather than virtual-hosted
    /// (`bucket.host/key`).
    pub path_style: bool,
    /// Certificates (PEM) trusted for an `https://` endpoint instead of Mozilla's roots.
    pub ca_file: Option<PathBuf>,
    /// Publish the manifests of the blocks tiered here, for replicas that follow this
    /// remote (`RS_REMOTE_<NAME>_PUBLISH_MANIFESTS`, default false: a few small objects
    /// per entry and tier run that no one reads otherwise).
    pub publish_manifests: bool,
}

/// The variable suffixes a remote reads.
pub const REMOTE_VARIABLES: [&str; 9] = [
    "ENDPOINT",
    "BUCKET",
    "PREFIX",
    "REGION",
    "ACCESS_KEY_ID",
    "SECRET_ACCESS_KEY_FILE",
    "PATH_STYLE",
    "CA_FILE",
    "PUBLISH_MANIFESTS",
];

/// A remote URL's endpoint, bucket and prefix.
type UrlParts = (String, String, String);

/// What a remote's URL gives: endpoint, bucket and prefix.
fn parse_url(name: &str, url: &str) -> Result<UrlParts> {
    let bad = |why: &str| Error::unprocessable(format!("--remote {name}: '{url}' {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("is not a URL like http://host:3900/bucket/prefix"))?;
    if scheme != "http" && scheme != "https" {
        return Err(bad("must start with http:// or https://"));
    }
    if rest
        .split('/')
        .next()
        .is_some_and(|host| host.contains('@'))
    {
        // The URL itself is not quoted: it holds a secret.
        return Err(Error::unprocessable(format!(
            "--remote {name}: the URL must not carry credentials: give them in RS_REMOTE_<NAME>_ACCESS_KEY_ID and RS_REMOTE_<NAME>_SECRET_ACCESS_KEY_FILE"
        )));
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    let path = path.trim_matches('/');
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    Ok((
        format!("{scheme}://{host}"),
        bucket.to_string(),
        prefix.trim_matches('/').to_string(),
    ))
}

/// The remotes of the command line (`NAME=URL` each) and of the environment (`vars`: every
/// variable, from which `RS_REMOTE_<NAME>_*` are taken). A remote named only in the
/// environment needs `RS_REMOTE_<NAME>_ENDPOINT`.
pub fn remotes_from(
    given: &[String],
    vars: &BTreeMap<String, String>,
) -> Result<Vec<RemoteSettings>> {
    let mut partial: BTreeMap<String, (String, Option<UrlParts>)> = BTreeMap::new();
    for item in given {
        let (name, url) = item.split_once('=').ok_or_else(|| {
            Error::unprocessable(format!(
                "--remote '{item}' is not NAME=URL (for example cold=http://127.0.0.1:3900/bucket/prefix)"
            ))
        })?;
        validate_remote_name(name)?;
        let parts = parse_url(name, url)?;
        if partial
            .insert(name.to_ascii_uppercase(), (name.to_string(), Some(parts)))
            .is_some()
        {
            return Err(Error::unprocessable(format!(
                "--remote {name} is given twice"
            )));
        }
    }
    for key in vars.keys() {
        let Some(rest) = key.strip_prefix("RS_REMOTE_") else {
            continue;
        };
        for suffix in REMOTE_VARIABLES {
            if let Some(name) = rest.strip_suffix(suffix).and_then(|n| n.strip_suffix('_'))
                && !name.is_empty()
            {
                partial
                    .entry(name.to_ascii_uppercase())
                    .or_insert_with(|| (name.to_ascii_lowercase(), None));
                break;
            }
        }
    }
    partial
        .into_values()
        .map(|(name, parts)| complete(name, parts, vars))
        .collect()
}

fn complete(
    name: String,
    parts: Option<UrlParts>,
    vars: &BTreeMap<String, String>,
) -> Result<RemoteSettings> {
    let var_name = |suffix: &str| format!("RS_REMOTE_{}_{suffix}", name.to_ascii_uppercase());
    let var = |suffix: &str| vars.get(&var_name(suffix)).filter(|v| !v.is_empty());
    let (mut endpoint, mut bucket, mut prefix) = parts.unwrap_or_default();
    if let Some(e) = var("ENDPOINT") {
        let (scheme_host, _, _) = parse_url(&name, e)?;
        endpoint = scheme_host;
    }
    if let Some(b) = var("BUCKET") {
        bucket = b.clone();
    }
    if let Some(p) = var("PREFIX") {
        prefix = p.trim_matches('/').to_string();
    }
    if endpoint.is_empty() {
        return Err(Error::unprocessable(format!(
            "remote '{name}' has no endpoint: give --remote {name}=URL or {}",
            var_name("ENDPOINT")
        )));
    }
    if bucket.is_empty() {
        return Err(Error::unprocessable(format!(
            "remote '{name}' names no bucket: give it in the URL's path or in {}",
            var_name("BUCKET")
        )));
    }
    let access_key_id = var("ACCESS_KEY_ID").cloned().ok_or_else(|| {
        Error::unprocessable(format!(
            "remote '{name}' has no access key: set {}",
            var_name("ACCESS_KEY_ID")
        ))
    })?;
    let secret_file = var("SECRET_ACCESS_KEY_FILE").ok_or_else(|| {
        Error::unprocessable(format!(
            "remote '{name}' has no secret key: set {} to a file holding it",
            var_name("SECRET_ACCESS_KEY_FILE")
        ))
    })?;
    // The file's content is never quoted in the message: it is the secret.
    let secret = std::fs::read_to_string(secret_file).map_err(|e| {
        Error::unprocessable(format!(
            "{} '{secret_file}' cannot be read: {e}",
            var_name("SECRET_ACCESS_KEY_FILE")
        ))
    })?;
    let secret = secret.trim();
    if secret.is_empty() {
        return Err(Error::unprocessable(format!(
            "{} '{secret_file}' is empty",
            var_name("SECRET_ACCESS_KEY_FILE")
        )));
    }
    let flag = |suffix: &str, default: bool| match var(suffix).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" || v == "1" => Ok(true),
        Some(v) if v == "false" || v == "0" => Ok(false),
        Some(v) => Err(Error::unprocessable(format!(
            "{} '{v}' is not true or false",
            var_name(suffix)
        ))),
    };
    let path_style = flag("PATH_STYLE", true)?;
    let publish_manifests = flag("PUBLISH_MANIFESTS", false)?;
    Ok(RemoteSettings {
        endpoint,
        bucket,
        prefix,
        region: var("REGION").cloned().unwrap_or_else(|| "garage".into()),
        access_key_id,
        secret_access_key: Secret::new(secret),
        path_style,
        ca_file: var("CA_FILE").map(PathBuf::from),
        publish_manifests,
        name,
    })
}

/// A remote's name: what policies and variable names carry.
pub fn validate_remote_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::unprocessable(format!(
            "remote name '{}' must be 1 to 64 letters, digits or '-'",
            crate::error::quoted(name)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_url_and_variables_make_a_remote_whose_secret_never_prints() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cr3t-value\n").unwrap();
        let env = vars(&[
            ("RS_REMOTE_COLD_ACCESS_KEY_ID", "GK123"),
            (
                "RS_REMOTE_COLD_SECRET_ACCESS_KEY_FILE",
                secret.to_str().unwrap(),
            ),
        ]);
        let remotes =
            remotes_from(&["cold=http://127.0.0.1:3900/frames/site-a/".into()], &env).unwrap();
        assert_eq!(remotes.len(), 1);
        let r = &remotes[0];
        assert_eq!(
            (
                r.name.as_str(),
                r.endpoint.as_str(),
                r.bucket.as_str(),
                r.prefix.as_str()
            ),
            ("cold", "http://127.0.0.1:3900", "frames", "site-a")
        );
        assert_eq!(r.secret_access_key.expose(), "s3cr3t-value");
        assert!(r.path_style);
        assert!(!format!("{r:?}").contains("s3cr3t"));
    }

    #[test]
    fn the_environment_alone_can_define_a_remote() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        let env = vars(&[
            ("RS_REMOTE_ARCHIVE_ENDPOINT", "https://s3.example.com"),
            ("RS_REMOTE_ARCHIVE_BUCKET", "b"),
            ("RS_REMOTE_ARCHIVE_REGION", "eu-west-1"),
            ("RS_REMOTE_ARCHIVE_PATH_STYLE", "false"),
            ("RS_REMOTE_ARCHIVE_ACCESS_KEY_ID", "AK"),
            (
                "RS_REMOTE_ARCHIVE_SECRET_ACCESS_KEY_FILE",
                secret.to_str().unwrap(),
            ),
        ]);
        let r = &remotes_from(&[], &env).unwrap()[0];
        assert_eq!(r.name, "archive");
        assert_eq!(r.region, "eu-west-1");
        assert!(!r.path_style);
    }

    #[test]
    fn bad_remotes_are_named() {
        let none = BTreeMap::new();
        for (given, needle) in [
            ("cold", "NAME=URL"),
            ("cold=ftp://x/b", "http://"),
            ("cold=http://key:secret@host/b", "credentials"),
            ("cold=http://host:3900", "no bucket"),
            ("co ld=http://host/b", "remote name"),
            ("cold=http://host/b", "RS_REMOTE_COLD_ACCESS_KEY_ID"),
        ] {
            let e = remotes_from(&[given.into()], &none).unwrap_err();
            assert!(e.message().contains(needle), "{given}: {e}");
            assert!(!e.message().contains("secret@"), "{e}");
        }
    }
}
