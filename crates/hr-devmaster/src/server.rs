//! Start-up (including recovery after a restart) and shutdown of a devmaster.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::master::{DevmasterConfig, Master};
use crate::persist::Persister;

/// A running devmaster.
pub struct Devmaster {
    master: Arc<Master>,
    server: JoinHandle<()>,
    tls_expiry: Option<String>,
}

impl Devmaster {
    /// Binds, recovers the state in `state_dir`, restarts allocations of active trials, and
    /// serves in the background.
    pub async fn start(mut config: DevmasterConfig) -> std::io::Result<Self> {
        // Trials run in their own work folders: every path handed to them must be absolute.
        config.state_dir = std::path::absolute(&config.state_dir)?;
        if !config.listen.ip().is_loopback() && config.password.is_none() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "--listen {}: without a password the devmaster serves on loopback only \
                     (127.0.0.1 or ::1); give --password-file FILE to serve on another address",
                    config.listen
                ),
            ));
        }
        if config.password.as_deref() == Some("") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "--password-file: the password is empty; write one into the file",
            ));
        }
        if let Some(path) = &config.record_requests {
            crate::record::check_recording(path)?;
        }
        let tls = config.tls.as_ref().map(crate::TlsFiles::load).transpose()?;
        std::fs::create_dir_all(&config.state_dir)?;
        let (state, persister) = Persister::open(&config.state_dir)?;
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr()?);
        let tls_expiry = tls.as_ref().and_then(|t| t.expiry.clone());
        if let Some(warning) = &tls_expiry {
            tracing::warn!("devmaster: {warning}");
        }
        let (acceptor, cert_pem) = tls.map(|t| (t.acceptor, t.cert_pem)).unzip();
        let info_view =
            crate::trial_info::InfoView::probe(&config.trial_info, &config.state_dir).await;
        let master = Arc::new(Master::new(
            config, url, state, persister, cert_pem, info_view,
        ));
        crate::scheduler::recover(&master);
        let router = crate::api::router(master.clone());
        let server = tokio::spawn(crate::listen::serve(listener, router, acceptor));
        Ok(Self {
            master,
            server,
            tls_expiry,
        })
    }

    /// The base URL (`http://127.0.0.1:PORT`, or `https://` when serving TLS).
    pub fn url(&self) -> &str {
        &self.master.url
    }

    /// How its trials see `/run/determined/info` (one line, for the start-up output).
    pub fn trial_info(&self) -> String {
        self.master.info_view.describe()
    }

    /// What it said at start about its certificate's end (expired, or expiring within two
    /// weeks), if anything.
    pub fn tls_expiry(&self) -> Option<&str> {
        self.tls_expiry.as_deref()
    }

    /// Why it stopped serving (its state could not be persisted), if it has.
    pub fn failure(&self) -> Option<String> {
        self.master.failure()
    }

    /// Stops serving, kills every running trial and command process group, and clears the
    /// shared info folder when trials used one.
    pub fn shutdown(self) {
        self.server.abort();
        crate::scheduler::kill_all(&self.master);
        self.master.info_view.clear_shared();
    }

    /// Stops serving and leaves every trial process running, as a crash of the devmaster would
    /// (for recovery tests).
    #[doc(hidden)]
    pub fn abandon(self) {
        self.server.abort();
    }
}
