//! `hessian-recipes devmaster`: the local master in the foreground.

use std::{process::ExitCode, time::Duration};

use anyhow::Context;
use hr_devmaster::{Devmaster, DevmasterConfig};

use crate::cli::DevmasterArgs;

pub(crate) fn run(args: &DevmasterArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let config = DevmasterConfig {
            listen: args.listen,
            state_dir: args.state_dir.clone(),
            trial_info: hr_devmaster::TrialInfo::Private,
            preemption_timeout: Duration::from_secs(args.preemption_timeout_seconds),
            record_requests: args.record_requests.clone(),
            password: args.password()?,
            tls: args
                .tls_cert
                .clone()
                .zip(args.tls_key.clone())
                .map(|(cert, key)| hr_devmaster::TlsFiles { cert, key }),
            slots: args.slots,
        };
        let master = match Devmaster::start(config).await {
            Ok(master) => master,
            // A flag the user can fix (--listen, --password-file, --tls-cert, --tls-key): exit 2.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                return Err(crate::Refused(e.to_string()).into());
            }
            Err(e) => return Err(anyhow::Error::new(e).context("starting the devmaster")),
        };
        println!(
            "devmaster listening on {} (state in {})",
            master.url(),
            args.state_dir.display()
        );
        // The first line on stdout stays the URL (scripts read it); the rest is the log.
        eprintln!("devmaster: {}", master.trial_info());
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut check = tokio::time::interval(Duration::from_millis(500));
        let failure = loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break None,
                _ = term.recv() => break None,
                _ = check.tick() => {
                    if let Some(why) = master.failure() {
                        break Some(why);
                    }
                }
            }
        };
        master.shutdown();
        match failure {
            // Fail closed: its state on disk is behind what it told clients.
            Some(why) => anyhow::bail!("the devmaster stopped: {why}"),
            None => {
                eprintln!("devmaster stopped");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
