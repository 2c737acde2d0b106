#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use gatehouse_config::{Config, ConfigErrors, Loader};
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A fast web gateway: static files and reverse proxy.
#[derive(Parser)]
#[command(
    name = "gatehouse",
    version,
    about,
    args_conflicts_with_subcommands = false
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    overrides: Overrides,
}

#[derive(Subcommand)]
enum Command {
    /// Print the effective configuration, or every error with its key, source and reason.
    Check {
        #[command(flatten)]
        overrides: Overrides,
    },
}

#[derive(Args, Clone, Default)]
struct Overrides {
    /// TOML configuration file (default: ./gatehouse.toml if present).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Directory to serve (the top-level `root`).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Address of the HTTP listener, such as 127.0.0.1:8080.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Address of the admin listener, such as 127.0.0.1:9090.
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<String>,
}

impl Overrides {
    fn merge(mut self, other: Overrides) -> Overrides {
        self.config = other.config.or(self.config);
        self.root = other.root.or(self.root);
        self.listen = other.listen.or(self.listen);
        self.admin_listen = other.admin_listen.or(self.admin_listen);
        self
    }

    fn loader(&self) -> Loader {
        let mut l = Loader::new();
        if let Some(f) = &self.config {
            l = l.file(f);
        }
        if let Some(r) = &self.root {
            l = l.cli("root", r.display().to_string());
        }
        if let Some(a) = &self.listen {
            l = l.cli("listen", a.clone());
        }
        if let Some(a) = &self.admin_listen {
            l = l.cli("admin_listen", a.clone());
        }
        l
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check { overrides }) => check(cli.overrides.merge(overrides)),
        None => run(cli.overrides),
    }
}

fn print_errors(errors: &ConfigErrors) {
    for e in &errors.0 {
        eprintln!("gatehouse: config error: {e}");
    }
}

fn check(o: Overrides) -> ExitCode {
    let config = match o.loader().load() {
        Ok(config) => config,
        Err(errors) => {
            print_errors(&errors);
            return ExitCode::FAILURE;
        }
    };
    // The warnings start would log while loading (a certificate no SNI name chooses, say).
    init_tracing("warn");
    // What start reads after the config, with the same code and messages, short of binding
    // sockets and contacting ACME or JWKS servers: routes (htpasswd files, log templates and
    // files, key files) and certificates.
    let mut refused = Vec::new();
    match gatehouse::router::build(&config) {
        Ok(router) => router.close_logs(),
        Err(e) => refused.push(e.to_string()),
    }
    if config.tls.is_some() {
        if let Err(e) = gatehouse::tls::Tls::new(&config) {
            refused.push(e);
        }
    }
    if !refused.is_empty() {
        for e in refused {
            eprintln!("gatehouse: {e}");
        }
        return ExitCode::FAILURE;
    }
    print!("{}", render(&config));
    eprintln!("gatehouse: configuration OK");
    ExitCode::SUCCESS
}

fn render(config: &Config) -> String {
    let mut shown = config.clone();
    if shown.admin_token.is_some() {
        shown.admin_token = Some(gatehouse_config::Secret::new("(hidden)"));
    }
    toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

fn run(o: Overrides) -> ExitCode {
    let config = match o.loader().load() {
        Ok(c) => c,
        Err(errors) => {
            print_errors(&errors);
            return ExitCode::FAILURE;
        }
    };
    init_tracing(&config.log_level);
    match gatehouse::server::listener::raise_nofile_limit() {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::warn!("could not raise the open files limit: {e}"),
    }
    if config.metrics.enabled {
        // Before the router and listeners: handles made earlier would record nothing.
        if let Err(e) = gatehouse::metrics::install() {
            tracing::warn!("metrics: {e}");
        }
    }
    let router = match gatehouse::router::build(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gatehouse: {e}");
            return ExitCode::FAILURE;
        }
    };
    let handle = match gatehouse::start(&config, router.clone()) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("gatehouse: {e}");
            return ExitCode::from(2);
        }
    };
    // Before "listening on": a POST /reload that follows that line must find it set.
    let reload = reloader(o, router.clone(), config.clone(), handle.tls().cloned());
    handle.set_reloader(reload.clone());
    for a in handle.addrs() {
        tracing::info!(
            "listening on http://{a} ({:?} runtime); admin on http://{}",
            config.runtime,
            handle.admin_addr()
        );
    }
    for a in handle.https_addrs() {
        tracing::info!("listening on https://{a}");
    }
    let logs = router.clone();
    wait_for_signal(&reload, &move || logs.reopen_logs());
    tracing::info!("draining (up to {:?})", config.timeouts.drain);
    let clean = handle.shutdown();
    // After the drain: every completed request's line is written before the exit.
    router.close_logs();
    let dropped = router.log_lines_dropped();
    if dropped > 0 {
        tracing::warn!("access log: {dropped} lines were dropped (the writer fell behind)");
    }
    let failed = router.log_lines_failed();
    if failed > 0 {
        tracing::warn!("access log: {failed} lines were lost to write errors");
    }
    if clean {
        tracing::info!("stopped");
    } else {
        tracing::warn!("drain timeout: closed the connections still open");
    }
    ExitCode::SUCCESS
}

/// Re-reads the configuration from the same sources as at start and swaps the routes.
/// Settings read once at start (listeners, runtime, workers, timeouts, limits) need a
/// restart: a change to them is reported, not applied.
fn reloader(
    o: Overrides,
    router: gatehouse::GatewayRouter,
    started: Config,
    tls: Option<std::sync::Arc<gatehouse::tls::Tls>>,
) -> gatehouse::server::Reloader {
    std::sync::Arc::new(move || {
        let config = o.loader().load().map_err(|errors| {
            let text: Vec<String> = errors.0.iter().map(|e| e.to_string()).collect();
            for t in &text {
                tracing::error!("reload refused: config error: {t}");
            }
            text.join("\n")
        })?;
        let waiting = restart_only_changes(&started, &config);
        for key in &waiting {
            tracing::warn!("reload: {key} changed, but takes effect only after a restart");
        }
        // Certificates first: if one is broken, nothing changes, routes included.
        if let (Some(tls), Some(t)) = (&tls, &config.tls) {
            tls.reload(t).map_err(|e| {
                tracing::error!("reload refused: {e}; the old certificates stay");
                e
            })?;
        }
        router.reload(&config).map_err(|e| {
            tracing::error!("reload refused: {e}");
            e.to_string()
        })?;
        tracing::info!("reloaded: {} routes", config.routes.len());
        Ok(waiting.into_iter().map(String::from).collect())
    })
}

/// The settings read once at start that differ between `started` and `now`: a reload
/// applies everything else and reports these.
fn restart_only_changes(started: &Config, now: &Config) -> Vec<&'static str> {
    // Certificates are reloaded; everything else in [tls] is read at start.
    let tls_at_start = |c: &Config| {
        c.tls.clone().map(|mut t| {
            t.certs.clear();
            t
        })
    };
    [
        // A name resolved again may list its addresses in another order.
        ("listen", !same_addrs(&now.listen, &started.listen)),
        ("admin_listen", now.admin_listen != started.admin_listen),
        (
            "admin_max_connections",
            now.admin_max_connections != started.admin_max_connections,
        ),
        (
            "admin_token",
            now.admin_token_resolved != started.admin_token_resolved,
        ),
        ("runtime", now.runtime != started.runtime),
        ("workers", now.workers != started.workers),
        ("steer_by_cpu", now.steer_by_cpu != started.steer_by_cpu),
        ("log_level", now.log_level != started.log_level),
        ("timeouts", now.timeouts != started.timeouts),
        ("limits", now.limits != started.limits),
        ("h2c", now.h2c != started.h2c),
        (
            "proxy_protocol",
            now.proxy_protocol != started.proxy_protocol,
        ),
        (
            "proxy_protocol_from",
            now.proxy_protocol_from != started.proxy_protocol_from,
        ),
        ("acme", now.acme != started.acme),
        ("metrics", now.metrics != started.metrics),
        (
            "tls (other than tls.certs)",
            tls_at_start(now) != tls_at_start(started),
        ),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

fn same_addrs(a: &[std::net::SocketAddr], b: &[std::net::SocketAddr]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

fn wait_for_signal(reload: &gatehouse::server::Reloader, reopen: &dyn Fn()) {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gatehouse: signal runtime: {e}");
            return;
        }
    };
    rt.block_on(async {
        let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
        ) else {
            eprintln!("gatehouse: cannot install signal handlers");
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => {
                    // Errors are logged by the reloader; serving goes on either way.
                    let _ = reload();
                }
                _ = usr1.recv() => {
                    // logrotate moved the access logs: write to new files of the same names.
                    tracing::info!("reopening the access logs");
                    reopen();
                }
            }
        }
    });
}

/// Colours only on a terminal, and not when `NO_COLOR` is set to anything but the empty
/// string (no-color.org).
fn use_colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .with_target(false)
        .init();
}
