//! Queued metric reports, like `determined.core`'s background reporter but with several reports
//! in flight: [`CoreContext::queue_training_metrics`] returns at once, a task on the context's
//! runtime posts up to [`IN_FLIGHT`] reports concurrently (the master stores each with its
//! `stepsCompleted`, so arrival order does not matter), and [`CoreContext::flush_metrics`]
//! returns once every queued report is delivered, or with the first failure.
//!
//! [`CoreContext::queue_training_metrics`]: crate::CoreContext::queue_training_metrics
//! [`CoreContext::flush_metrics`]: crate::CoreContext::flush_metrics

use hr_det::Client;
use serde_json::Value;
use tokio::{sync::mpsc, task::JoinHandle, task::JoinSet};

use crate::CoreError;

/// Reports posted concurrently.
pub(crate) const IN_FLIGHT: usize = 8;

/// One report: group, steps completed, metrics.
pub(crate) type Report = (&'static str, i32, Value);

/// The open queue of a context.
pub(crate) struct MetricsQueue {
    tx: mpsc::UnboundedSender<Report>,
    done: JoinHandle<Result<u64, CoreError>>,
}

impl MetricsQueue {
    /// Starts the delivering task on `runtime`.
    pub(crate) fn start(
        runtime: &tokio::runtime::Runtime,
        client: Client,
        trial: i32,
        run: i32,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let done = runtime.spawn(deliver(client, trial, run, rx));
        Self { tx, done }
    }

    /// Queues a report; `false` when the delivering task has stopped (after a failure, which
    /// [`MetricsQueue::close`] returns).
    pub(crate) fn push(&self, report: Report) -> bool {
        self.tx.send(report).is_ok()
    }

    /// Closes the queue and waits until everything queued is delivered; returns how many were.
    pub(crate) async fn close(self) -> Result<u64, CoreError> {
        drop(self.tx);
        self.done
            .await
            .map_err(|e| CoreError::Environment(format!("the metrics reporter stopped: {e}")))?
    }
}

async fn deliver(
    client: Client,
    trial: i32,
    run: i32,
    mut rx: mpsc::UnboundedReceiver<Report>,
) -> Result<u64, CoreError> {
    let mut sending = JoinSet::new();
    let mut delivered = 0;
    while let Some((group, steps, metrics)) = rx.recv().await {
        if sending.len() >= IN_FLIGHT
            && let Some(sent) = sending.join_next().await
        {
            sent.map_err(|e| CoreError::Environment(e.to_string()))??;
            delivered += 1;
        }
        let client = client.clone();
        sending.spawn(async move { report(&client, trial, run, group, steps, metrics).await });
    }
    while let Some(sent) = sending.join_next().await {
        sent.map_err(|e| CoreError::Environment(e.to_string()))??;
        delivered += 1;
    }
    Ok(delivered)
}

/// Posts one report. When the answer is lost the report counts if the master holds it, and is
/// sent again otherwise (never counted twice: the master recognises a replay).
pub(crate) async fn report(
    client: &Client,
    trial: i32,
    run: i32,
    group: &str,
    steps: i32,
    metrics: Value,
) -> Result<(), CoreError> {
    let send = |metrics: Value| client.report_metrics(trial, run, group, steps, metrics, None);
    match send(metrics.clone()).await {
        Err(hr_det::DetError::Unconfirmed { .. }) => {
            let held = client
                .trial_metrics(trial, group)
                .await?
                .iter()
                .any(|m| m.trial_run_id == run && m.total_batches == steps);
            if !held {
                send(metrics).await?;
            }
            Ok(())
        }
        other => Ok(other?),
    }
}
