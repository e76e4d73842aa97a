use super::*;

#[test]
fn permissions_match_names_prefixes_and_never_system_buckets_by_wildcard() {
    let caller = Caller {
        name: "t".into(),
        permissions: Permissions {
            full_access: false,
            read: vec!["cam-*".into(), "logs".into(), "*".into()],
            write: vec!["cam-*".into()],
        },
    };
    assert!(caller.check(Access::Read("anything")).is_ok());
    assert!(caller.check(Access::Write("cam-front")).is_ok());
    let err = caller.check(Access::Write("logs")).unwrap_err();
    assert_eq!(
        err.message(),
        "Token 't' doesn't have write access to bucket 'logs'"
    );
    assert!(caller.check(Access::Read("$system")).is_err());
    assert_eq!(
        caller.check(Access::Full).unwrap_err().message(),
        "Token 't' doesn't have full access"
    );
}

#[test]
fn tokens_are_stored_hashed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let repo = TokenRepository::open(dir.path(), "init-secret").unwrap();
    let (value, _) = repo
        .create("reader", br#"{"permissions":{"read":["b"]}}"#)
        .unwrap();
    assert!(value.starts_with("reader-") && value.len() == "reader-".len() + 32);
    let stored = std::fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
    assert!(
        !stored.contains(&value) && stored.contains("sha256:"),
        "{stored}"
    );
    let caller = repo
        .authenticate(Some(&format!("Bearer {value}")), None)
        .unwrap();
    assert_eq!(caller.name, "reader");
    assert!(
        repo.authenticate(Some("Bearer reader-00000000000000000000000000000000"), None)
            .is_err()
    );
    assert!(repo.authenticate(Some("init-secret"), None).is_err());
    assert!(
        repo.authenticate(Some("Bearer init-secret"), None)
            .unwrap()
            .permissions
            .full_access
    );
    // Reopened from the file.
    let repo = TokenRepository::open(dir.path(), "init-secret").unwrap();
    assert!(
        repo.authenticate(Some(&format!("Bearer {value}")), None)
            .is_ok()
    );
    let (rotated, _) = repo.rotate("reader").unwrap();
    assert!(
        repo.authenticate(Some(&format!("Bearer {value}")), None)
            .is_err()
    );
    assert!(
        repo.authenticate(Some(&format!("Bearer {rotated}")), None)
            .is_ok()
    );
    repo.remove("reader").unwrap();
    assert!(
        repo.authenticate(Some(&format!("Bearer {rotated}")), None)
            .is_err()
    );
}

#[test]
fn create_validates_like_reductstore() {
    let dir = tempfile::tempdir().unwrap();
    let repo = TokenRepository::open(dir.path(), "x").unwrap();
    let err = |body: &str| {
        repo.create("t", body.as_bytes())
            .unwrap_err()
            .message()
            .to_string()
    };
    assert_eq!(
        err(r#"{"permissions":{"read":["b/c"]}}"#),
        "Permission can contain only bucket names or wildcard '*', got 'b/c'"
    );
    assert_eq!(
        err(r#"{"permissions":{},"ttl":0}"#),
        "Token TTL must be greater than zero"
    );
    assert_eq!(
        err(r#"{"permissions":{},"expires_at":"2001-01-01T00:00:00Z"}"#),
        "Token expiration date must not be in the past"
    );
    assert_eq!(
        err(r#"{"permissions":{},"expires_at":"2999-01-01T00:00:00"}"#),
        "Invalid body"
    );
    assert_eq!(err(r#"{"permissions":{},"colour":1}"#), "Invalid body");
    assert_eq!(err("not json"), "Invalid body");
    // The legacy body is the permissions object itself; `{}` is no permissions.
    repo.create("legacy", br#"{"full_access":false,"read":["a"]}"#)
        .unwrap();
    repo.create("empty", b"{}").unwrap();
    assert_eq!(
        repo.create("empty", b"{}").unwrap_err().kind(),
        ErrorKind::Conflict
    );
    assert_eq!(
        repo.get("legacy").unwrap().permissions.read,
        vec!["a".to_string()]
    );
}

#[test]
fn expiry_ttl_and_allowlists() {
    let dir = tempfile::tempdir().unwrap();
    let repo = TokenRepository::open(dir.path(), "x").unwrap();
    let (v, _) = repo
        .create(
            "net",
            br#"{"permissions":{},"ip_allowlist":["10.1.0.0/16","::1"]}"#,
        )
        .unwrap();
    let auth = |ip: &str| repo.authenticate(Some(&format!("Bearer {v}")), ip.parse().ok());
    assert!(auth("10.1.2.3").is_ok());
    assert!(auth("::1").is_ok());
    assert_eq!(
        auth("10.2.0.1").unwrap_err().message(),
        "Token is not allowed for client IP 10.2.0.1"
    );
    assert_eq!(
        auth("").unwrap_err().message(),
        "Client IP is required for this token"
    );
    let token = StoredToken {
        name: "t".into(),
        hash: String::new(),
        created_at: 0,
        permissions: Permissions::default(),
        expires_at: Some(10),
        ttl: None,
        ip_allowlist: Vec::new(),
        last_used: None,
        chosen_value: false,
    };
    assert!(!TokenRepository::is_expired(&token, None, 9));
    assert!(TokenRepository::is_expired(&token, None, 10));
    let idle = StoredToken {
        expires_at: None,
        ttl: Some(3),
        ..token
    };
    assert!(!TokenRepository::is_expired(
        &idle,
        Some(1_000_000),
        4_000_000
    ));
    assert!(TokenRepository::is_expired(
        &idle,
        Some(1_000_000),
        5_000_001
    ));
    // Without trusted proxies, forwarding headers count for nothing.
    let local: Option<IpAddr> = "127.0.0.1".parse().ok();
    let none = TrustedProxies::default();
    assert_eq!(client_ip(local, None, Some("10.9.9.9"), &none), local);
    assert_eq!(client_ip(local, Some("for=10.9.9.9"), None, &none), local);
    // Behind a trusted proxy: the nearest untrusted hop, read from the right.
    let trusted = TrustedProxies::parse("127.0.0.1, 10.0.0.0/8").expect("valid");
    assert_eq!(
        client_ip(local, None, Some("6.6.6.6, 1.2.3.4, 10.0.0.7"), &trusted),
        "1.2.3.4".parse().ok(),
        "the client-written 6.6.6.6 is not believed"
    );
    assert_eq!(
        client_ip(local, Some("for=\"[2001:db8::1]:80\""), None, &trusted),
        "2001:db8::1".parse().ok()
    );
    assert_eq!(
        client_ip(local, Some("for=unknown"), None, &trusted),
        local,
        "an obfuscated hop leaves the proxy's own address"
    );
    let public: Option<IpAddr> = "8.8.8.8".parse().ok();
    assert_eq!(client_ip(public, None, Some("10.0.0.1"), &trusted), public);
    assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
    assert!(TrustedProxies::parse("proxy.local").is_err());
    assert!(TrustedProxies::parse("").expect("empty").is_empty());
}

#[test]
fn secrets_compare_by_content_and_length() {
    assert!(constant_time_eq(b"s3cret", b"s3cret"));
    assert!(!constant_time_eq(b"s3cret", b"s3creT"));
    assert!(!constant_time_eq(b"s3cret", b"s3cret2"));
    assert!(!constant_time_eq(b"", b"x"));
    assert!(constant_time_eq(b"", b""));
}

#[test]
fn the_last_use_of_a_ttl_token_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let repo = TokenRepository::open(dir.path(), "x").unwrap();
    let (v, _) = repo
        .create("idle", br#"{"permissions":{},"ttl":3600}"#)
        .unwrap();
    repo.authenticate(Some(&format!("Bearer {v}")), None)
        .unwrap();
    assert!(repo.get("idle").unwrap().last_access.is_some());
    drop(repo);
    let again = TokenRepository::open(dir.path(), "x").unwrap();
    assert!(
        again.get("idle").unwrap().last_access.is_some(),
        "the last use was kept"
    );
    assert!(
        again
            .authenticate(Some(&format!("Bearer {v}")), None)
            .is_ok()
    );
}
