//! The README and `docs/` hold up: the examples they show are `examples/` as they are
//! (which `cargo test` builds, so neither can rot), every setting `serve --help` lists is
//! in `docs/configuration.md`, the README stays short, every document it links exists,
//! and nothing links outside the repository.

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn the_library_doc_shows_the_library_example_as_it_is() {
    let doc = read("docs/library.md");
    let example = read("examples/library.rs");
    assert!(
        doc.contains(&format!("```rust\n{example}```")),
        "docs/library.md must show examples/library.rs verbatim in a rust block"
    );
}

#[test]
fn every_serve_setting_is_in_the_configuration_doc() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_halflife"))
        .args(["serve", "--help"])
        .output()
        .expect("serve --help");
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    let doc = read("docs/configuration.md");
    let mut checked = 0;
    for line in help.lines().map(str::trim_start) {
        let Some(rest) = line.strip_prefix("--") else {
            if let Some(env) = line.strip_prefix("[env: ") {
                let name = env.split(['=', ']']).next().unwrap_or_default();
                assert!(
                    doc.contains(&format!("`{name}`")),
                    "docs/configuration.md lacks {name}"
                );
            }
            continue;
        };
        let option = rest.split([' ', '=', ',']).next().unwrap_or_default();
        if option == "help" {
            continue;
        }
        assert!(
            doc.contains(&format!("`--{option}")),
            "docs/configuration.md lacks --{option}"
        );
        checked += 1;
    }
    assert!(checked > 40, "only {checked} options found in:\n{help}");
}

#[test]
fn the_readme_is_short() {
    let readme = read("README.md");
    assert!(
        readme.lines().count() <= 250,
        "README.md has {} lines",
        readme.lines().count()
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

/// Every Markdown document of the repository: the README, ARCHITECTURE and `docs/`.
fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        // Pictures beside the documents (a screenshot the README shows) are not text.
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs
}

#[test]
fn docs_link_nothing_outside_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in documents() {
        let text = read(&doc);
        let base = root
            .join(&doc)
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap();
        for (n, line) in text.lines().enumerate() {
            for link in line.split("](").skip(1) {
                let target = link.split(')').next().unwrap_or_default();
                if target.starts_with("http") || target.starts_with('#') {
                    continue;
                }
                let path = base.join(target.split('#').next().unwrap_or_default());
                let inside = path
                    .canonicalize()
                    .is_ok_and(|p| p.starts_with(root.canonicalize().unwrap()));
                assert!(
                    inside,
                    "{doc}:{}: {target} is not a file of the repository",
                    n + 1
                );
            }
            // A path in the text (not a link) must not leave it either.
            if !line.contains("](") {
                assert!(
                    !line.contains("../"),
                    "{doc}:{}: a path outside the repository: {line}",
                    n + 1
                );
            }
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
