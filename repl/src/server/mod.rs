//! `weir serve`: the PostgreSQL-wire endpoint. psql, psycopg, JDBC and the sqllogictest runner
//! connect here. Every connection is a session with its own settings over one shared catalog
//! and job manager, so sink jobs and materialized views outlive the connection that created
//! them. Built on the `pgwire` crate (simple and extended query protocols).

mod auth;
mod handler;
mod params;
mod pg_catalog;
mod rows;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use weir_planner::{Session, SessionConfig};

use handler::{Shared, WireHandlers};

/// Stack of the threads that parse, plan and run statements for wire clients.
const PLANNING_STACK: usize = 16 << 20;

/// What `weir serve` was told.
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub config: SessionConfig,
    /// Directory wire sessions may read and write files under.
    pub file_root: PathBuf,
    /// With a password, clients authenticate with SCRAM-SHA-256.
    pub password: Option<String>,
    /// Where to serve metrics, the JSON API and the dashboard (same password).
    pub http: Option<SocketAddr>,
}

/// Runs the server until SIGINT / SIGTERM, then stops running jobs with a checkpoint.
pub fn serve(options: ServeOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&options.file_root)?;
    let file_root = options.file_root.canonicalize()?;
    let mut config = options.config;
    config.base_dir = Some(file_root.clone());
    config.file_root = Some(file_root.clone());
    let (session, warnings) = Session::open(config.clone())?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    if let Some(addr) = options.http {
        let http = crate::http::start(addr, session.job_observer(), options.password.clone())?;
        eprintln!("dashboard and metrics at http://{}/", http.addr);
    }
    let shared = Arc::new(Shared::new(session, config));
    // Planning recurses over expressions up to the front end's depth limit
    // (`MAX_EXPRESSION_DEPTH`): give the threads that plan the room for it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir-wire")
        .thread_stack_size(PLANNING_STACK)
        .build()?;
    let result = runtime.block_on(accept_loop(
        options.listen,
        Arc::clone(&shared),
        options.password,
        file_root,
    ));
    eprintln!("stopping jobs with a final checkpoint");
    if let Err(e) = shared.stop_jobs() {
        eprintln!("error: {e}");
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn accept_loop(
    listen: SocketAddr,
    shared: Arc<Shared>,
    password: Option<String>,
    file_root: PathBuf,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr()?;
    let auth = if password.is_some() {
        "SCRAM-SHA-256 password"
    } else {
        "no password"
    };
    // Tests and scripts wait for this line (the port may have been chosen by the OS).
    eprintln!(
        "weir serve: listening on {local} ({auth}; file root {})",
        file_root.display()
    );
    let handlers = Arc::new(WireHandlers::new(shared, password));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: keep serving the others.
                        eprintln!("warning: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let handlers = Arc::clone(&handlers);
                tokio::spawn(async move {
                    // A connection's protocol errors end that connection only.
                    let _ = pgwire::tokio::process_socket(socket, None, handlers).await;
                });
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}
