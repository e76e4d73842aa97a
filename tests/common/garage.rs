//! A real object store for the tier's tests: Garage (`cargo install garage --locked`,
//! installed by `.ci/run` into cargo's bin folder), started on loopback with a config the
//! test writes — one node with replication factor 1, or a cluster of three with factor 3.
//! Without the binary the tests are ignored; with `HALFLIFE_REQUIRE_GARAGE=1` they fail.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::closed_port;

/// The Garage binary, for a test that runs with it (see `tests/common/tools.rs`).
pub fn garage() -> PathBuf {
    super::tools::require(super::tools::Tool::Garage).remove(0)
}

/// The Garage binary, if there is one: for the benches, whose tier rows are optional.
pub fn garage_if_present() -> Option<PathBuf> {
    super::tools::Tool::Garage.find().ok()?.into_iter().next()
}

/// One Garage node's process.
pub struct GarageNode {
    bin: PathBuf,
    /// Its config file.
    pub config: PathBuf,
    /// Its S3 API address.
    pub s3_port: u16,
    rpc_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl GarageNode {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("-c").arg(&self.config);
        c
    }

    /// Runs a `garage` command against this node and returns its output; panics on failure.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("run garage");
        assert!(
            out.status.success(),
            "garage {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let out = self.command().args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts (or starts again) the node's server.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the node is running");
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log file");
        let child = self
            .command()
            .arg("server")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start garage");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.try_cli(&["status"]).is_none() {
            assert!(
                Instant::now() < deadline,
                "garage did not start: {}",
                std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the node (SIGKILL: a node lost, not shut down).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The node's id as `garage node id` prints it (`<id>@<addr>`).
    fn node_id(&self) -> String {
        self.cli(&["node", "id", "-q"]).trim().to_string()
    }
}

impl Drop for GarageNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Garage cluster with a bucket and a key allowed on it.
pub struct Garage {
    /// Its nodes; the first is the one the tests talk to.
    pub nodes: Vec<GarageNode>,
    /// The bucket made for the test.
    pub bucket: String,
    /// The key's id.
    pub key_id: String,
    /// The key's secret.
    pub secret: String,
    _dir: tempfile::TempDir,
}

fn write_config(dir: &Path, rpc_port: u16, s3_port: u16, secret: &str, replication: u32) {
    let admin_port = closed_port();
    let config = format!(
        r#"metadata_dir = "{dir}/meta"
data_dir = "{dir}/data"
db_engine = "sqlite"
replication_factor = {replication}
rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{secret}"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:{s3_port}"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:{admin_port}"
"#,
        dir = dir.display()
    );
    std::fs::write(dir.join("garage.toml"), config).expect("write garage.toml");
}

impl Garage {
    /// One node, replication factor 1.
    pub fn single(bin: &Path) -> Garage {
        Self::cluster(bin, 1)
    }

    /// `count` nodes, replication factor `count`, connected and laid out, with a bucket
    /// and a key.
    pub fn cluster(bin: &Path, count: usize) -> Garage {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret: String = (0..32).map(|_| format!("{:02x}", rand_byte())).collect();
        let mut nodes = Vec::new();
        for i in 0..count {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir).expect("node dir");
            // Permissions Garage insists on for a config holding the RPC secret.
            let (rpc_port, s3_port) = (closed_port(), closed_port());
            write_config(&node_dir, rpc_port, s3_port, &secret, count as u32);
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                node_dir.join("garage.toml"),
                std::fs::Permissions::from_mode(0o600),
            )
            .expect("chmod");
            let mut node = GarageNode {
                bin: bin.to_path_buf(),
                config: node_dir.join("garage.toml"),
                s3_port,
                rpc_port,
                dir: node_dir,
                child: None,
            };
            node.start();
            nodes.push(node);
        }
        let first = &nodes[0];
        for other in &nodes[1..] {
            let id = other.node_id();
            first.cli(&["node", "connect", &id]);
            let _ = other.rpc_port;
        }
        for node in &nodes {
            let id = node.node_id();
            let short = id.split('@').next().unwrap_or_default().to_string();
            first.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &short]);
        }
        first.cli(&["layout", "apply", "--version", "1"]);
        let bucket = "halflife-test".to_string();
        // The layout takes a moment to reach every node: retried until the bucket exists.
        let deadline = Instant::now() + Duration::from_secs(30);
        while first.try_cli(&["bucket", "create", &bucket]).is_none() {
            assert!(Instant::now() < deadline, "garage never took the bucket");
            std::thread::sleep(Duration::from_millis(100));
        }
        let key = first.cli(&["key", "create", "halflife-test-key"]);
        let field = |name: &str| {
            key.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("no {name} in {key}"))
        };
        let (key_id, secret) = (field("Key ID:"), field("Secret key:"));
        first.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            &bucket,
            "--key",
            "halflife-test-key",
        ]);
        let garage = Garage {
            nodes,
            bucket,
            key_id,
            secret,
            _dir: dir,
        };
        // The key's permission takes a moment to reach every node: ready once it writes.
        let client =
            halflife::storage::remote::s3::S3Client::new(&garage.settings("probe", "")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = client.put(".ready", b"ready") {
            assert!(
                Instant::now() < deadline,
                "garage never took a write: {}",
                e.message
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        client.delete(".ready").unwrap();
        garage
    }

    /// The S3 endpoint of the first node.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.nodes[0].s3_port)
    }

    /// The environment that configures remote `name` against this store, with its secret
    /// in a file under `dir`: `--remote` is given as `RS_REMOTE_<NAME>_ENDPOINT` and
    /// `_BUCKET`.
    pub fn remote_env(&self, name: &str, prefix: &str, dir: &Path) -> Vec<(String, String)> {
        let secret_file = dir.join(format!("{name}.secret"));
        std::fs::write(&secret_file, &self.secret).expect("write secret");
        let upper = name.to_ascii_uppercase();
        vec![
            (format!("RS_REMOTE_{upper}_ENDPOINT"), self.endpoint()),
            (format!("RS_REMOTE_{upper}_BUCKET"), self.bucket.clone()),
            (format!("RS_REMOTE_{upper}_PREFIX"), prefix.to_string()),
            (
                format!("RS_REMOTE_{upper}_ACCESS_KEY_ID"),
                self.key_id.clone(),
            ),
            (
                format!("RS_REMOTE_{upper}_SECRET_ACCESS_KEY_FILE"),
                secret_file.display().to_string(),
            ),
        ]
    }

    /// The settings of remote `name` for library use.
    pub fn settings(
        &self,
        name: &str,
        prefix: &str,
    ) -> halflife::storage::remote::settings::RemoteSettings {
        let mut s = remote_settings(
            &self.endpoint(),
            &self.bucket,
            &self.key_id,
            &self.secret,
            prefix,
        );
        s.name = name.to_string();
        s
    }
}

/// The settings of a remote `cold` on a Garage at `endpoint`.
pub fn remote_settings(
    endpoint: &str,
    bucket: &str,
    key_id: &str,
    secret: &str,
    prefix: &str,
) -> halflife::storage::remote::settings::RemoteSettings {
    halflife::storage::remote::settings::RemoteSettings {
        name: "cold".to_string(),
        endpoint: endpoint.to_string(),
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
        region: "garage".into(),
        access_key_id: key_id.to_string(),
        secret_access_key: halflife::storage::remote::settings::Secret::new(secret),
        path_style: true,
        ca_file: None,
        publish_manifests: false,
    }
}

fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    getrandom::fill(&mut b).expect("random");
    b[0]
}
