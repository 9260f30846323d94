//! The Kubernetes manifests in `deploy/k8s/`: parsed and checked for one Indexed
//! Job whose pods are the segments of one run meeting on the daemon's Service, and
//! then run: the daemon's and the Job's command lines, with Kubernetes' `$(VAR)`
//! expansion done here and only the cluster's addresses swapped for loopback ones,
//! as local processes against a local target.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::client;
use common::process::{rfc3339_in, wait_bounded};
use gust_engine::{TargetConfig, TargetServer};
use serde::Deserialize;
use serde_json::Value;

const TOKEN: &str = "k8s-test-token";

fn manifest(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/k8s")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The value after `flag` in a command line.
fn after<'a>(command: &'a [String], flag: &str) -> &'a str {
    let i = command.iter().position(|a| a == flag).unwrap_or_else(|| {
        panic!("{flag} missing from {command:?}");
    });
    &command[i + 1]
}

/// Kubernetes' expansion of `$(NAME)` in a container's command from its env.
fn expand(arg: &str, env: &HashMap<String, String>) -> String {
    let mut out = arg.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    out
}

/// A container's literal env values, and its secret references by name.
fn env_of(container: &Value) -> (HashMap<String, String>, HashMap<String, (String, String)>) {
    let (mut literal, mut secret) = (HashMap::new(), HashMap::new());
    for e in container["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        if let Some(v) = e["value"].as_str() {
            literal.insert(name, v.to_string());
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            secret.insert(name, (s("name"), s("key")));
        }
    }
    (literal, secret)
}

struct Manifests {
    daemon_command: Vec<String>,
    daemon_secret: (String, String),
    service_url: String,
    job_command: Vec<String>,
    job_env: HashMap<String, String>,
    segments: u64,
    run_toml: String,
    spec_path: String,
}

/// Reads both manifests, checking how their parts refer to each other.
fn read_manifests() -> Manifests {
    let daemon = manifest("gust-daemon.yaml");
    let deployment = of_kind(&daemon, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1, "one meeting point");
    let dc = &deployment["spec"]["template"]["spec"]["containers"][0];
    let daemon_command = strings(&dc["command"]);
    assert_eq!(daemon_command[..2], ["gust", "serve"]);
    let port = dc["ports"][0]["containerPort"].as_u64().unwrap();
    let port_name = dc["ports"][0]["name"].as_str().unwrap();
    assert_eq!(
        after(&daemon_command, "--listen"),
        format!("0.0.0.0:{port}")
    );
    let (_, daemon_secrets) = env_of(dc);
    let daemon_secret = daemon_secrets["GUST_TOKEN"].clone();
    let service = of_kind(&daemon, "Service");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let sp = &service["spec"]["ports"][0];
    assert_eq!(sp["targetPort"], port_name);
    let service_url = format!(
        "http://{}:{}",
        service["metadata"]["name"].as_str().unwrap(),
        sp["port"]
    );

    let run = manifest("gust-run.yaml");
    let job = of_kind(&run, "Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let segments = spec["completions"].as_u64().unwrap();
    assert_eq!(spec["parallelism"], segments, "every segment at once");
    assert_eq!(spec["backoffLimit"], 0, "a failed segment is not run twice");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let jc = &pod["containers"][0];
    assert_eq!(jc["image"], dc["image"]);
    let job_command = strings(&jc["command"]);
    assert_eq!(job_command[..2], ["gust", "run"]);
    assert_eq!(
        after(&job_command, "--segment"),
        format!("$(JOB_COMPLETION_INDEX)/{segments}")
    );
    assert_eq!(after(&job_command, "--start-at"), "$(START_AT)");
    assert_eq!(after(&job_command, "--daemon"), service_url);
    assert_eq!(after(&job_command, "--run"), "$(RUN_NAME)");
    let (job_env, job_secrets) = env_of(jc);
    assert!(gust_engine::config::parse_start_at(&job_env["START_AT"]).is_ok());
    assert!(!job_env["RUN_NAME"].is_empty());
    assert_eq!(job_secrets["GUST_TOKEN"], daemon_secret, "one token");
    // The spec file is the ConfigMap's run.toml, mounted where the command reads it.
    let spec_path = job_command[2].clone();
    let mount = jc["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert_eq!(spec_path, format!("{mount}/run.toml"));
    let volume = &pod["volumes"][0];
    assert_eq!(volume["name"], jc["volumeMounts"][0]["name"]);
    let config_map = of_kind(&run, "ConfigMap");
    assert_eq!(volume["configMap"]["name"], config_map["metadata"]["name"]);
    let run_toml = config_map["data"]["run.toml"].as_str().unwrap().to_string();

    // The image puts `gust` on the PATH both commands use.
    let dockerfile = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s/Dockerfile"),
    )
    .unwrap();
    assert!(dockerfile.contains("/usr/local/bin/gust"));
    Manifests {
        daemon_command,
        daemon_secret,
        service_url,
        job_command,
        job_env,
        segments,
        run_toml,
        spec_path,
    }
}

#[test]
fn the_manifests_are_one_indexed_run_meeting_on_the_daemon_service() {
    let m = read_manifests();
    assert_eq!(m.daemon_secret, ("gust-token".into(), "token".into()));
    // The ConfigMap's spec is a valid run spec with valid thresholds.
    let mut spec: toml::Table = toml::from_str(&m.run_toml).unwrap();
    let thresholds = spec.remove("thresholds").unwrap();
    for t in thresholds.as_array().unwrap() {
        gust_engine::threshold::parse(t.as_str().unwrap()).unwrap();
    }
    // Its target is a cluster name: checked with a local one in its place.
    spec.insert("url".into(), "http://127.0.0.1:9/".into());
    let spec: gust_engine::RunSpec = toml::Value::Table(spec).try_into().unwrap();
    spec.validate().unwrap();
    assert!(m.segments >= 2);
}

#[test]
fn the_manifests_command_lines_run_as_local_processes() {
    let m = read_manifests();
    let dir = tempfile::tempdir().unwrap();
    let target = TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            threads: 1,
            ..TargetConfig::default()
        },
    )
    .unwrap();

    // The daemon, as the Deployment runs it, on loopback and a local history.
    let gust = PathBuf::from(env!("CARGO_BIN_EXE_gust"));
    let mut daemon_args = m.daemon_command[1..].to_vec();
    let listen = daemon_args.iter().position(|a| a == "--listen").unwrap() + 1;
    daemon_args[listen] = "127.0.0.1:0".into();
    let db = daemon_args.iter().position(|a| a == "--db").unwrap() + 1;
    daemon_args[db] = dir.path().join("history.db").display().to_string();
    let mut daemon = Command::new(&gust)
        .args(&daemon_args)
        .env("GUST_TOKEN", TOKEN)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(daemon.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("daemon exited").unwrap();
        if let Some(url) = line.strip_prefix("gust serve listening on ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});

    // The ConfigMap's spec, aimed at the local target for a short run.
    const RATE: i64 = 400;
    let mut spec: toml::Table = toml::from_str(&m.run_toml).unwrap();
    spec.insert("url".into(), format!("http://{}/", target.addr()).into());
    spec.insert("duration".into(), "2s".into());
    spec.insert("rate".into(), RATE.into());
    spec.insert("workers".into(), 1.into());
    spec.insert(
        "thresholds".into(),
        toml::Value::Array(vec!["errors<1%".into()]),
    );
    let spec_file = dir.path().join("run.toml");
    std::fs::write(&spec_file, toml::to_string(&spec).unwrap()).unwrap();

    // The pods: the Job's command with the env Kubernetes would expand.
    let mut env = m.job_env.clone();
    env.insert("START_AT".into(), rfc3339_in(1500));
    let pods: Vec<_> = (0..m.segments)
        .map(|i| {
            env.insert("JOB_COMPLETION_INDEX".into(), i.to_string());
            let args: Vec<String> = m.job_command[1..]
                .iter()
                .map(|a| expand(a, &env))
                .map(|a| {
                    if a == m.service_url {
                        base.clone()
                    } else if a == m.spec_path {
                        spec_file.display().to_string()
                    } else {
                        a
                    }
                })
                .collect();
            assert!(!args.iter().any(|a| a.contains("$(")), "{args:?}");
            Command::new(&gust)
                .args(&args)
                .env("GUST_TOKEN", TOKEN)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, pod) in pods.into_iter().enumerate() {
        let out = wait_bounded(pod, Duration::from_secs(60));
        assert_eq!(
            out.status.code(),
            Some(0),
            "pod {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let http = client();
    let refused = http.get(format!("{base}/runs")).send().unwrap();
    assert_eq!(refused.status().as_u16(), 401, "the daemon needs the token");
    let runs: Value = http
        .get(format!("{base}/runs"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = &runs["runs"][0];
    assert_eq!(run["name"].as_str(), Some(m.job_env["RUN_NAME"].as_str()));
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_i64().unwrap();
    let stored: Value = http
        .get(format!("{base}/runs/{id}/report"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let report = &stored["report"];
    assert_eq!(stored["verdict"], "pass", "{stored}");
    assert_eq!(report["sent"], RATE * 2);
    assert_eq!(report["missing"], serde_json::json!([]));
    assert_eq!(
        report["segments"].as_array().unwrap().len() as u64,
        m.segments
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}
