//! The README holds up: the library example it shows is `examples/library.rs` as it is
//! (which `cargo test` builds, so neither can rot), and it links nothing outside the
//! repository.

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn the_readme_shows_the_library_example_as_it_is() {
    let readme = read("README.md");
    let example = read("examples/library.rs");
    assert!(
        readme.contains(&format!("```rust\n{example}```")),
        "README.md must show examples/library.rs verbatim in a rust block"
    );
}

#[test]
fn the_readme_shows_the_python_example_as_ci_runs_it() {
    // CI runs examples/quickstart.py twice against a server (.ci/run).
    let readme = read("README.md");
    let example = read("examples/quickstart.py");
    assert!(
        readme.contains(&format!("```python\n{example}```")),
        "README.md must show examples/quickstart.py verbatim in a python block"
    );
}

#[test]
fn docs_link_nothing_outside_the_repository() {
    for doc in ["README.md", "ARCHITECTURE.md"] {
        let text = read(doc);
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains("../"),
                "{doc}:{}: a path outside the repository: {line}",
                n + 1
            );
        }
    }
}

#[test]
fn the_deployment_files_match_the_crate() {
    let cargo = read("Cargo.toml");
    let rust_version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("Cargo.toml states rust-version");
    let docker = read("deploy/Dockerfile");
    assert!(
        docker.contains(&format!("FROM rust:{rust_version}-")),
        "the Dockerfile builds with the crate's rust-version ({rust_version})"
    );
    for needed in [
        "RS_HOST=0.0.0.0",
        "RS_DATA_PATH=/data",
        "VOLUME /data",
        "/api/v1/alive",
    ] {
        assert!(docker.contains(needed), "the Dockerfile sets {needed}");
    }
    let unit = read("deploy/halflife.service");
    for needed in [
        "ExecStart=/usr/local/bin/halflife serve",
        "Environment=RS_HOST=0.0.0.0",
        "StateDirectory=halflife",
        "Environment=RS_DATA_PATH=/var/lib/halflife",
    ] {
        assert!(unit.contains(needed), "the unit has {needed}");
    }
    // Every directory the Dockerfile copies exists (a build would fail otherwise).
    for line in docker
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let sources: Vec<&str> = line.split_whitespace().skip(1).collect();
        for source in &sources[..sources.len() - 1] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
            assert!(
                path.exists(),
                "the Dockerfile copies {source}, which is missing"
            );
        }
    }
}
