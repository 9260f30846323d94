//! `warrant audit`: `verify` recomputes the transparency log from the
//! database (and the archive) and holds it to checkpoints saved elsewhere;
//! `witness` follows a log's checkpoints, checks each is consistent with
//! the last it holds, and cosigns.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use warrant_server::LoadedConfig;
use warrant_server::transparency::LogSigner;
use warrant_store::{AuditVerifyError, LogBreak, Store};
use warrant_tlog::{Checkpoint, Hash, NoteVerifier, SignedNote, WitnessSigner};

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Recompute every tree of the log (and every chain of the older hash
    /// chains), optionally holding them to saved checkpoints.
    Verify(VerifyArgs),
    /// Follow a log's checkpoints, check each against the last one held,
    /// and cosign it; refuse a fork or a rollback.
    Witness(WitnessArgs),
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The server's data dir (its `warrant.toml` names the database).
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// A checkpoint saved earlier: the JSON of `GET /api/v1/audit/checkpoint`
    /// or one signed note. Repeat for several (two that disagree at one
    /// size are a fork).
    #[arg(long = "checkpoint")]
    pub checkpoints: Vec<PathBuf>,
    /// The log's verifier key (`<name>+<id>+<key>`); default: the data
    /// dir's `ca/log.key`.
    #[arg(long)]
    pub key: Option<String>,
    /// Also recompute pruned leaves from this archive directory (default:
    /// the data dir's `archive/`, when it exists).
    #[arg(long)]
    pub archive: Option<PathBuf>,
}

#[derive(Args)]
pub struct WitnessArgs {
    /// The log's base URL (`http://127.0.0.1:8443`).
    #[arg(long)]
    pub log: String,
    /// Where the witness keeps its key and the last checkpoint it
    /// cosigned per tree.
    #[arg(long)]
    pub state: PathBuf,
    /// The log's verifier key; default: the one pinned in the state dir,
    /// else the one the log announces (pinned on first use).
    #[arg(long)]
    pub log_key: Option<String>,
    /// Poll every this many seconds; without it, one round and exit.
    #[arg(long)]
    pub interval: Option<u64>,
    /// The witness's name (its key's name) when the state dir has no key.
    #[arg(long, default_value = "warrant-witness")]
    pub name: String,
}

/// Exit status: 0 verified, 1 something is wrong (named), 2 the check
/// could not run.
pub fn run(cmd: AuditCommand) -> ExitCode {
    let outcome = match cmd {
        AuditCommand::Verify(args) => verify(&args),
        AuditCommand::Witness(args) => witness(&args),
    };
    match outcome {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(wrong)) => {
            println!("audit log BROKEN: {wrong}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A checkpoint from a file, checked against the log key.
struct Held {
    file: PathBuf,
    tree: String,
    checkpoint: Checkpoint,
}

/// Every signed note in `text`: a checkpoint listing (JSON) or one note.
fn notes_in(text: &str) -> Result<Vec<String>> {
    if text.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
        let list = v["checkpoints"]
            .as_array()
            .context("no \"checkpoints\" array")?;
        return list
            .iter()
            .map(|c| {
                c["checkpoint"]
                    .as_str()
                    .map(str::to_string)
                    .context("a checkpoint entry without \"checkpoint\"")
            })
            .collect();
    }
    Ok(vec![text.to_string()])
}

/// Opens a signed checkpoint of this log: the signature, then the origin
/// `<log name>/<tree>`. Returns the tree's name and the checkpoint.
fn open_checkpoint(note: &str, key: &NoteVerifier) -> Result<(String, Checkpoint), String> {
    let cp = Checkpoint::open(note, key).map_err(|e| format!("signature: {e}"))?;
    let tree = cp
        .origin
        .strip_prefix(&format!("{}/", key.name()))
        .ok_or_else(|| format!("origin {} is not of log {}", cp.origin, key.name()))?
        .to_string();
    Ok((tree, cp))
}

fn b64(h: &Hash) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(h)
}

fn verify(args: &VerifyArgs) -> Result<Result<(), String>> {
    // Fail closed: a mistyped data dir must not open (and create) an empty
    // database whose zero trees would "verify".
    if !warrant_ca::Hierarchy::exists(&args.data_dir) {
        bail!(
            "{} is not an initialised data dir (no CA in it)",
            args.data_dir.display()
        );
    }
    let key = match &args.key {
        Some(k) => NoteVerifier::parse(k).map_err(|e| anyhow::anyhow!("--key: {e}"))?,
        None => LogSigner::load(&args.data_dir)?
            .verifier()
            .map_err(|e| anyhow::anyhow!("the data dir's log key: {e}"))?,
    };
    let mut held: Vec<Held> = Vec::new();
    for file in &args.checkpoints {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for note in notes_in(&text).with_context(|| format!("{}", file.display()))? {
            match open_checkpoint(&note, &key) {
                Ok((tree, checkpoint)) => held.push(Held {
                    file: file.clone(),
                    tree,
                    checkpoint,
                }),
                Err(e) => return Ok(Err(format!("{}: checkpoint {e}", file.display()))),
            }
        }
    }
    // Two checkpoints of one tree and size with different roots: a fork,
    // whatever the database says.
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            if a.tree == b.tree
                && a.checkpoint.size == b.checkpoint.size
                && a.checkpoint.root != b.checkpoint.root
            {
                return Ok(Err(format!(
                    "tree {}: a fork: at size {} {} has root {} and {} has root {}: two different trees for one size",
                    a.tree,
                    a.checkpoint.size,
                    a.file.display(),
                    b64(&a.checkpoint.root),
                    b.file.display(),
                    b64(&b.checkpoint.root)
                )));
            }
        }
    }
    let archive_dir = args
        .archive
        .clone()
        .or_else(|| Some(args.data_dir.join("archive")).filter(|d| d.is_dir()));
    let archived = match &archive_dir {
        Some(dir) => read_archive(dir)?,
        None => HashMap::new(),
    };
    let loaded = LoadedConfig::load(&args.data_dir)
        .with_context(|| format!("loading {}", args.data_dir.display()))?;
    let rt = crate::server_cli::runtime()?;
    rt.block_on(async {
        let mut opts = warrant_server::state::store_options(&loaded.config);
        // A reader: it must not start a tree of its own.
        opts.log = false;
        let store = Store::open(&loaded.database_url(), opts)
            .await
            .context("opening the database")?;
        let outcome = verify_store(&store, &key, &held, &archived).await;
        store.shutdown().await;
        outcome
    })
}

async fn verify_store(
    store: &Store,
    key: &NoteVerifier,
    held: &[Held],
    archived: &HashMap<String, BTreeMap<u64, Hash>>,
) -> Result<Result<(), String>> {
    match store.audit().verify().await {
        Ok(chains) => {
            for c in &chains {
                println!(
                    "chain {} (before the Merkle log): rows {}..={} ok",
                    c.chain, c.first_seq, c.last_seq
                );
            }
        }
        Err(AuditVerifyError::Broken(b)) => return Ok(Err(b.to_string())),
        Err(AuditVerifyError::Store(e)) => return Err(e).context("reading the audit chains"),
    }
    let trees = store
        .log()
        .trees()
        .await
        .context("reading the log's trees")?;
    for h in held {
        if !trees.iter().any(|t| t.name == h.tree) {
            return Ok(Err(LogBreak::MissingTree(h.tree.clone()).to_string()));
        }
    }
    let mut leaves = 0;
    for tree in &trees {
        let signed = match &tree.checkpoint {
            Some(note) => match open_checkpoint(note, key) {
                Ok((name, cp)) if name == tree.name => Some((cp.size, cp.root)),
                Ok((name, _)) => {
                    return Ok(Err(format!(
                        "tree {}: the checkpoint kept for it names tree {name}",
                        tree.name
                    )));
                }
                Err(e) => {
                    return Ok(Err(format!(
                        "tree {}: the checkpoint kept for it fails: {e}",
                        tree.name
                    )));
                }
            },
            None => None,
        };
        let held_to: Vec<(u64, Hash)> = held
            .iter()
            .filter(|h| h.tree == tree.name)
            .map(|h| (h.checkpoint.size, h.checkpoint.root))
            .collect();
        match store
            .log()
            .verify_tree(tree, &held_to, signed, archived.get(&tree.name))
            .await
        {
            Ok(r) => {
                leaves += r.size;
                let held_note = if held_to.is_empty() {
                    String::new()
                } else {
                    format!(", consistent with {} saved checkpoint(s)", held_to.len())
                };
                println!(
                    "tree {}: {} leaves ({} in the database), root {} ok{held_note}",
                    r.tree,
                    r.size,
                    r.live_leaves,
                    b64(&r.root)
                );
            }
            Err(LogBreak::Store(e)) => return Err(e).context("reading the log"),
            Err(b) => return Ok(Err(b.to_string())),
        }
    }
    println!("audit log verified: {} trees, {leaves} leaves", trees.len());
    Ok(Ok(()))
}

/// Archived leaf hashes per tree (`archive/log-*.jsonl.zst`).
fn read_archive(dir: &Path) -> Result<HashMap<String, BTreeMap<u64, Hash>>> {
    let archive = warrant_store::Archive::open(dir)
        .with_context(|| format!("opening the archive {}", dir.display()))?;
    let mut out: HashMap<String, BTreeMap<u64, Hash>> = HashMap::new();
    for l in archive
        .read_log()
        .with_context(|| format!("reading the archive {}", dir.display()))?
    {
        let bytes = l
            .bytes()
            .with_context(|| format!("archive: leaf {} of {} is not base64", l.index, l.tree))?;
        out.entry(l.tree)
            .or_default()
            .insert(l.index, warrant_tlog::leaf_hash(&bytes));
    }
    Ok(out)
}

// ---- witness ----

const WITNESS_KEY_FILE: &str = "witness.key";
const LOG_KEY_FILE: &str = "log.vkey";

fn witness(args: &WitnessArgs) -> Result<Result<(), String>> {
    std::fs::create_dir_all(&args.state)
        .with_context(|| format!("creating {}", args.state.display()))?;
    let signer = witness_key(&args.state, &args.name)?;
    println!("witness {}", signer.verifier_key());
    let rt = crate::server_cli::runtime()?;
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        loop {
            match witness_round(&client, args, &signer).await? {
                Ok(()) => {}
                Err(refused) => return Ok(Err(refused)),
            }
            match args.interval {
                Some(s) => tokio::time::sleep(Duration::from_secs(s.max(1))).await,
                None => return Ok(Ok(())),
            }
        }
    })
}

fn witness_key(state: &Path, name: &str) -> Result<WitnessSigner> {
    let path = state.join(WITNESS_KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => WitnessSigner::from_private_key_string(text.trim())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let s = WitnessSigner::generate(name).map_err(|e| anyhow::anyhow!("{e}"))?;
            write_atomic(&path, &format!("{}\n", s.private_key_string()))?;
            Ok(s)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// The file a tree's last cosigned checkpoint is kept in.
fn tree_file(state: &Path, tree: &str) -> PathBuf {
    let safe: String = tree
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    state.join(format!("{safe}.checkpoint"))
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<serde_json::Value> {
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    let body = resp.text().await.with_context(|| format!("GET {url}"))?;
    if !status.is_success() {
        bail!("GET {url}: {status}: {body}");
    }
    serde_json::from_str(&body).with_context(|| format!("GET {url}: not JSON"))
}

/// One round: fetch every tree's checkpoint; for each, check it against
/// the one held (same size: same root; larger: a consistency proof;
/// smaller: a rollback), then cosign and keep it. A tree held but no longer
/// listed is a rollback too.
async fn witness_round(
    client: &reqwest::Client,
    args: &WitnessArgs,
    signer: &WitnessSigner,
) -> Result<Result<(), String>> {
    let base = args.log.trim_end_matches('/');
    let listing = get_json(
        client,
        &format!("{base}/api/v1/audit/checkpoint?fresh=true"),
    )
    .await?;
    let pinned_path = args.state.join(LOG_KEY_FILE);
    let announced = listing["key"].as_str().unwrap_or_default().to_string();
    let key_text = match (&args.log_key, std::fs::read_to_string(&pinned_path)) {
        (Some(k), _) => k.clone(),
        (None, Ok(p)) => p.trim().to_string(),
        (None, Err(_)) => {
            write_atomic(&pinned_path, &format!("{announced}\n"))?;
            announced.clone()
        }
    };
    let key = NoteVerifier::parse(&key_text).map_err(|e| anyhow::anyhow!("log key: {e}"))?;
    let notes = notes_in(&listing.to_string())?;
    let mut seen = Vec::new();
    for note in notes {
        let (tree, cp) = match open_checkpoint(&note, &key) {
            Ok(x) => x,
            Err(e) => return Ok(Err(format!("refused: a checkpoint {e}"))),
        };
        seen.push(tree.clone());
        let path = tree_file(&args.state, &tree);
        if let Ok(prev_text) = std::fs::read_to_string(&path) {
            let (_, prev) = match open_checkpoint(&prev_text, &key) {
                Ok(x) => x,
                Err(e) => bail!("{}: the held checkpoint {e}", path.display()),
            };
            if cp.size < prev.size {
                return Ok(Err(format!(
                    "refused: rollback: tree {tree} is at size {} but this witness cosigned size {}",
                    cp.size, prev.size
                )));
            }
            if cp.size == prev.size && cp.root != prev.root {
                return Ok(Err(format!(
                    "refused: fork: tree {tree} at size {} has root {}, this witness cosigned {}",
                    cp.size,
                    b64(&cp.root),
                    b64(&prev.root)
                )));
            }
            if cp.size > prev.size && prev.size > 0 {
                let url = format!(
                    "{base}/api/v1/audit/proof/consistency?tree={tree}&from={}&to={}",
                    prev.size, cp.size
                );
                let proof = get_json(client, &url).await?;
                let hashes: Option<Vec<Hash>> = proof["proof"]
                    .as_array()
                    .map(|a| a.iter().map(decode_hash).collect())
                    .unwrap_or_default();
                let Some(hashes) = hashes else {
                    return Ok(Err(format!(
                        "refused: tree {tree}: malformed consistency proof"
                    )));
                };
                if let Err(e) = warrant_tlog::verify_consistency(
                    prev.size, cp.size, &prev.root, &cp.root, &hashes,
                ) {
                    return Ok(Err(format!(
                        "refused: fork: tree {tree}: size {} is not consistent with the size {} this witness cosigned: {e}",
                        cp.size, prev.size
                    )));
                }
            }
        }
        let mut signed = SignedNote::parse(&note).map_err(|e| anyhow::anyhow!("{e}"))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let line = signer
            .cosign(&signed.text, now)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        signed
            .add_signature_line(&line)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        write_atomic(&path, &signed.to_string())?;
        println!("tree {tree}: size {} cosigned", cp.size);
    }
    // A tree this witness holds that the log no longer lists.
    for entry in std::fs::read_dir(&args.state)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("checkpoint") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        if let Ok((tree, cp)) = open_checkpoint(&text, &key)
            && !seen.contains(&tree)
        {
            return Ok(Err(format!(
                "refused: rollback: tree {tree} (cosigned at size {}) is gone from the log",
                cp.size
            )));
        }
    }
    Ok(Ok(()))
}

fn decode_hash(v: &serde_json::Value) -> Option<Hash> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()?;
    bytes.try_into().ok()
}
