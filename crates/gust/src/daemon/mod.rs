//! `gust serve`: the REST API, live SSE, SQLite history and the dashboard.
//!
//! Handlers stay thin: they validate, then call the [`runs`] manager or the [`store`].
//! One run at a time: two load runs on one machine would skew each other's numbers,
//! so a second `POST /runs` while one is running gets 409 `run_active`.

mod api;
mod capacity;
pub mod meeting;
pub mod metrics;
pub mod runs;
pub mod settings;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use api::router;
use runs::Manager;
use store::{Retention, Store};

pub struct ServeOptions {
    pub listen: SocketAddr,
    pub db: PathBuf,
    pub token: Option<String>,
    pub retention: Retention,
    /// Worker threads runs get when their spec sets none.
    pub workers: Option<usize>,
}

/// Binds, reconciles and prunes the history, then serves until the process ends.
pub fn serve(opts: ServeOptions) -> Result<(), String> {
    if !opts.listen.ip().is_loopback() && opts.token.as_deref().is_none_or(str::is_empty) {
        return Err(format!(
            "binding {} (not loopback) requires --token or GUST_TOKEN",
            opts.listen
        ));
    }
    let manager = open_manager(&opts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("gust serve listening on http://{addr}");
        serve_on(listener, manager, opts.token).await
    })
}

/// Opens the history (reconciling runs a crashed daemon left `running`, pruning)
/// and builds the run manager over it.
pub fn open_manager(opts: &ServeOptions) -> Result<Arc<Manager>, String> {
    let store = Store::open(&opts.db)
        .map_err(|e| format!("cannot open history {}: {e}", opts.db.display()))?;
    let failed = store.reconcile_crashed().map_err(|e| e.to_string())?;
    if failed > 0 {
        eprintln!("gust serve: marked {failed} run(s) left running by a previous daemon as failed");
    }
    store.prune(opts.retention).map_err(|e| e.to_string())?;
    Ok(Arc::new(Manager::new(store, opts.retention, opts.workers)))
}

/// Serves the API on an already bound listener (`gust mcp` binds 127.0.0.1:0 and
/// needs the address before serving).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    manager: Arc<Manager>,
    token: Option<String>,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = router(manager, token, addr);
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}
