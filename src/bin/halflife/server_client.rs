//! The commands that look at and drive a running server through its API (so the data
//! directory's lock stays with the server): `info --url`, `policy ls` and `policy run`.

use crate::stdout::{emit, emit_line};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use halflife::error::ErrorKind;
use halflife::lifecycle::{LifecycleInfo, LifecycleSettings};
use halflife::report::{self, BucketReport, PolicyReport, human_bytes, policies};
use halflife::wire::percent;
use halflife::{Error, Result};

/// Where the server is and who asks.
#[derive(Args, Clone)]
pub(crate) struct ServerArgs {
    /// The server's URL (e.g. http://127.0.0.1:8383).
    #[arg(long, env = "HALFLIFE_URL", default_value = "http://127.0.0.1:8383", value_parser = server_url)]
    pub url: String,
    /// API token (a full-access one to see and run policies).
    #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Checks a server URL for clap: `host:port` gets `http://`; a scheme other than
/// `http` or `https`, or no host, is refused saying so.
pub(crate) fn server_url(text: &str) -> std::result::Result<String, String> {
    let text = text.trim();
    let url = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let (scheme, rest) = url.split_once("://").unwrap_or(("", ""));
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!(
            "the scheme '{scheme}' is not one a server speaks: give http://HOST:PORT or https://HOST:PORT"
        ));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err("no host: give http://HOST:PORT (e.g. http://127.0.0.1:8383)".into());
    }
    Ok(url)
}

/// `halflife policy ...`.
#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
    /// List the server's lifecycle policies with their state: running, catching up,
    /// caught up, failing, disabled or invalid; last and next run; bytes saved.
    Ls {
        #[command(flatten)]
        server: ServerArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a policy now and follow the run to its end (a progress bar on a terminal, from
    /// the run's own progress through its window), then print its `lifecycle_run` event.
    /// Exit status 1 when the run failed.
    Run {
        /// The policy.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// A blocking client of the server's API.
struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(server: &ServerArgs) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        Client {
            agent,
            base: server.url.trim_end_matches('/').to_string(),
            token: server.token.clone().filter(|t| !t.is_empty()),
        }
    }

    /// Sends a request to `/api/v1/{path}`; returns the status and body, or the error
    /// the server gave (its `x-reduct-error`) with the status.
    fn send(&self, method: &str, path: &str) -> Result<(u16, String)> {
        let url = format!("{}/api/v1/{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let sent = match method {
            "POST" => {
                let request = self.agent.post(&url);
                match &auth {
                    Some(auth) => request.header("authorization", auth),
                    None => request,
                }
                .send_empty()
            }
            _ => {
                let request = self.agent.get(&url);
                match &auth {
                    Some(auth) => request.header("authorization", auth),
                    None => request,
                }
                .call()
            }
        };
        let mut response = sent.map_err(|e| {
            Error::internal(format!("{method} {url}: the server cannot be reached: {e}"))
        })?;
        let status = response.status().as_u16();
        let reason = response
            .headers()
            .get("x-reduct-error")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response
            .body_mut()
            .read_to_string()
            .map_err(|e| Error::internal(format!("{method} {url}: reading the answer: {e}")))?;
        if status >= 400 {
            let why = reason.unwrap_or_else(|| body.trim().to_string());
            return Err(Error::new(
                ErrorKind::from_http_status(status),
                format!("{method} {url}: {status} {why}"),
            ));
        }
        Ok((status, body))
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let (_, body) = self.send("GET", path)?;
        serde_json::from_str(&body).map_err(|e| {
            Error::internal(format!(
                "GET {}/api/v1/{path}: the answer does not parse: {e}",
                self.base
            ))
        })
    }
}

#[derive(Deserialize)]
struct BucketName {
    name: String,
}

#[derive(Deserialize)]
struct BucketList {
    buckets: Vec<BucketName>,
}

#[derive(Deserialize)]
struct PolicyList {
    lifecycles: Vec<LifecycleInfo>,
}

#[derive(Deserialize)]
struct FullPolicy {
    info: LifecycleInfo,
    settings: LifecycleSettings,
}

/// `halflife info --url`: the same report as offline, from the server (only the
/// buckets it shows are asked for).
pub(crate) fn info(server: &ServerArgs, shown: &crate::Shown) -> Result<()> {
    let client = Client::new(server);
    // Which server answers, and in what role: a PRIMARY or SECONDARY that waits for the
    // lease answers 503 naming the active one, and that is the error shown.
    let about: serde_json::Value = client.get("info")?;
    let list: BucketList = client.get("list")?;
    let mut buckets: Vec<BucketReport> = Vec::new();
    for bucket in list.buckets {
        let wanted = match &shown.bucket {
            Some(only) => *only == bucket.name,
            None => true,
        };
        // A left-out system bucket is still listed, unread, so the table can say so.
        if !wanted || (!shown.all && shown.bucket.is_none() && bucket.name.starts_with('$')) {
            if wanted {
                buckets.push(BucketReport::named(&bucket.name));
            }
            continue;
        }
        buckets.push(client.get(&format!("storage/{}", percent::encode(&bucket.name)))?);
    }
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    crate::print_report(buckets, shown)?;
    if !shown.json {
        emit_line(&server_line(&about));
    }
    Ok(())
}

/// The line under the report about the server `/info` describes: its name, version and
/// role (with its state when it is one of a PRIMARY/SECONDARY pair).
fn server_line(info: &serde_json::Value) -> String {
    let text = |key: &str| info[key].as_str().unwrap_or("?").to_string();
    let state = match info["instance_state"].as_str() {
        Some(state) => format!(", {state}"),
        None => String::new(),
    };
    format!(
        "served by instance {} (halflife {}): {}{state}",
        text("instance_name"),
        info["halflife_version"]
            .as_str()
            .map_or_else(|| text("version"), str::to_string),
        text("instance_role")
    )
}

fn policy(client: &Client, name: &str) -> Result<FullPolicy> {
    client.get(&format!("lifecycles/{}", percent::encode(name)))
}

/// `halflife policy ls`.
pub(crate) fn ls(server: &ServerArgs, json: bool) -> Result<()> {
    let client = Client::new(server);
    let list: PolicyList = client.get("lifecycles")?;
    let mut reports = Vec::new();
    for info in list.lifecycles {
        let full = policy(&client, &info.name)?;
        reports.push((
            full.settings.bucket.clone(),
            policies::live(&full.info, &full.settings),
        ));
    }
    if json {
        let rows: Vec<serde_json::Value> = reports
            .iter()
            .map(|(bucket, p)| serde_json::json!({ "bucket": bucket, "policy": p }))
            .collect();
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| Error::internal(format!("encoding the list: {e}")))?;
        emit_line(&text);
        return Ok(());
    }
    emit(&policy_table(&reports));
    Ok(())
}

/// The policies as a table: one row each.
fn policy_table(reports: &[(String, PolicyReport)]) -> String {
    let mut out = format!(
        "{:<24} {:<9} {:<20} {:<8} {:<28} {:<12} {:<20} {:<20} {:>10}\n",
        "policy", "type", "bucket", "mode", "does", "state", "last run", "next run", "saved"
    );
    // What a policy does: a compress policy's codec, a delete policy's `when` (cut).
    let does = |p: &PolicyReport| match (&p.target, &p.when) {
        (Some(codec), _) => codec.clone(),
        (None, Some(when)) if when.chars().count() > 28 => {
            format!("{}…", when.chars().take(27).collect::<String>())
        }
        (None, Some(when)) => when.clone(),
        (None, None) => "all".to_string(),
    };
    let time = |t: &Option<String>| {
        t.as_deref()
            .map_or("-".to_string(), |t| match t.split_once('.') {
                Some((seconds, _)) => format!("{seconds}Z"),
                None => t.to_string(),
            })
    };
    for (bucket, p) in reports {
        out.push_str(&format!(
            "{:<24} {:<9} {:<20} {:<8} {:<28} {:<12} {:<20} {:<20} {:>10}\n",
            p.name,
            p.kind.as_str(),
            bucket,
            p.mode.as_str(),
            does(p),
            p.state,
            time(&p.last_run),
            time(&p.next_run),
            human_bytes(p.bytes_saved_total.unwrap_or(0))
        ));
        if let Some(error) = &p.error {
            out.push_str(&format!("  error: {error}\n"));
        }
    }
    out
}

/// `halflife policy run NAME`: asks for a run, follows it, prints its event. Returns
/// whether the run succeeded.
pub(crate) fn run(server: &ServerArgs, name: &str) -> Result<bool> {
    let client = Client::new(server);
    let before = policy(&client, name)?.info.total_runs;
    match client.send("POST", &format!("lifecycles/{}/run", percent::encode(name))) {
        Ok(_) => eprintln!("policy '{name}': run requested"),
        // A run that started on its own meanwhile is the one followed.
        Err(e) if e.message().contains("already running") => {
            eprintln!("policy '{name}' is running already: following that run")
        }
        Err(e) => return Err(e),
    }
    // A spinner until there is something to count, then a bar that only moves forward.
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let mut forward = ForwardProgress::default();
    let mut styled = false;
    let started = Instant::now();
    let info = loop {
        let full = policy(&client, name)?;
        if full.info.total_runs > before && !full.info.running_now {
            break full.info;
        }
        if let Some(progress) = full.info.progress {
            let bytes = progress.bytes_total > 0;
            let (done, total) = if bytes {
                (progress.bytes_done, progress.bytes_total)
            } else {
                (progress.records_done, progress.records_total)
            };
            if let Some((position, length)) = forward.update(progress.window_start, done, total) {
                if !styled {
                    let style = if bytes {
                        "{spinner} [{bar:30}] {binary_bytes}/{binary_total_bytes} {msg}"
                    } else {
                        "{spinner} [{bar:30}] {pos}/{len} records {msg}"
                    };
                    bar.set_style(
                        ProgressStyle::with_template(style)
                            .map(|s| s.progress_chars("#>."))
                            .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                    styled = true;
                }
                bar.set_length(length);
                bar.set_position(position);
            }
            bar.set_message(format!(
                "{}/{} blocks, window {} → {}",
                progress.blocks_done,
                progress.blocks_total,
                report::human_time(progress.window_start),
                report::human_time(progress.window_stop)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    bar.finish_and_clear();
    let Some(event) = info.last_event else {
        return Err(Error::internal(format!(
            "policy '{name}' ran but the server reported no result"
        )));
    };
    let text = serde_json::to_string_pretty(&event)
        .map_err(|e| Error::internal(format!("encoding the event: {e}")))?;
    emit_line(&text);
    eprintln!(
        "policy '{name}': {} after {:.1} s: {} records, {} blocks{}{}",
        if event.is_error() { "failed" } else { "done" },
        started.elapsed().as_secs_f64(),
        event.processed_records,
        event.processed_blocks,
        if event.bytes_saved > 0 {
            format!(", saved {}", human_bytes(event.bytes_saved))
        } else {
            String::new()
        },
        if event.caught_up {
            ", caught up"
        } else {
            ", not caught up yet (the next run follows soon)"
        }
    );
    Ok(!event.is_error())
}

/// A run's progress as one bar over all its windows: each window reports its own done and
/// total, starting again from 0, so finished windows are added up below the current one.
/// The position never goes back, and nothing is shown until there is something to count
/// (a bar full at 0 of 0 says nothing).
#[derive(Default)]
struct ForwardProgress {
    /// The current window (its start), and its last total.
    window: Option<(u64, u64)>,
    /// What the finished windows counted.
    base: u64,
    /// The last position shown.
    shown: u64,
}

impl ForwardProgress {
    /// The window starting at `window` reports `done` of `total`: returns the bar's
    /// position and length, or `None` while there is nothing to count.
    fn update(&mut self, window: u64, done: u64, total: u64) -> Option<(u64, u64)> {
        match self.window {
            Some((start, last_total)) if start != window => self.base += last_total,
            _ => {}
        }
        self.window = Some((window, total));
        if self.base + total == 0 {
            return None;
        }
        let length = self.base + total;
        self.shown = (self.base + done.min(total)).max(self.shown).min(length);
        Some((self.shown, length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_over_windows_only_moves_forward() {
        let mut p = ForwardProgress::default();
        assert_eq!(p.update(10, 0, 0), None);
        assert_eq!(p.update(10, 500, 1665), Some((500, 1665)));
        assert_eq!(p.update(10, 1023, 1665), Some((1023, 1665)));
        // A report that went back (a retried block) does not move the bar back.
        assert_eq!(p.update(10, 900, 1665), Some((1023, 1665)));
        // The next window starts again from 0: the first one counts as done.
        assert_eq!(p.update(20, 0, 1665), Some((1665, 3330)));
        assert_eq!(p.update(20, 1665, 1665), Some((3330, 3330)));
    }

    #[test]
    fn urls_without_a_scheme_are_http_and_others_are_named() {
        assert_eq!(
            server_url("127.0.0.1:8383").as_deref(),
            Ok("http://127.0.0.1:8383")
        );
        assert_eq!(server_url("https://h:1/").as_deref(), Ok("https://h:1/"));
        assert!(server_url("ftp://h").unwrap_err().contains("'ftp'"));
        assert!(server_url("http://").unwrap_err().contains("no host"));
    }
}
