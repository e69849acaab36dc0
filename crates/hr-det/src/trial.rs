//! Trial-side calls: what the Core API does inside a trial.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    Client, DetError,
    client::Body,
    wire::{
        Checkpoint, CompleteOperationRequest, MetricsBody, PreemptionResponse,
        ReportMetricsRequest, RunsStartRequest, RunsStartResponse, SearcherOperationResponse,
        TrialMetrics,
    },
};

const NO_BODY: Body<'static, ()> = Body::None;

impl Client {
    /// `POST /api/v1/runs/start`.
    pub async fn runs_start(
        &self,
        trial: i32,
        checkpoint_storage: Value,
    ) -> Result<RunsStartResponse, DetError> {
        let body = RunsStartRequest {
            run_id: trial,
            checkpoint_storage,
        };
        self.call(
            Method::POST,
            "api/v1/runs/start",
            Body::Json(&body),
            true,
            None,
        )
        .await
    }

    /// Reports metrics of `group` at `steps_completed` for the allocation `trial_run_id`.
    pub async fn report_metrics(
        &self,
        trial: i32,
        trial_run_id: i32,
        group: &str,
        steps_completed: i32,
        metrics: Value,
        report_time: Option<String>,
    ) -> Result<(), DetError> {
        let body = ReportMetricsRequest {
            group: group.to_owned(),
            metrics: TrialMetrics {
                trial_id: trial,
                trial_run_id,
                steps_completed,
                report_time,
                metrics: MetricsBody {
                    avg_metrics: metrics,
                    batch_metrics: None,
                },
            },
        };
        let _: Value = self
            .call(
                Method::POST,
                &format!("api/v1/trials/{trial}/metrics"),
                Body::Json(&body),
                true,
                None,
            )
            .await?;
        Ok(())
    }

    /// `POST /api/v1/checkpoints`: the body is the checkpoint itself.
    pub async fn report_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), DetError> {
        if checkpoint.steps_completed().is_none() {
            return Err(DetError::Config(
                "checkpoint metadata must contain an integer steps_completed".into(),
            ));
        }
        let _: Value = self
            .call(
                Method::POST,
                "api/v1/checkpoints",
                Body::Json(checkpoint),
                true,
                None,
            )
            .await?;
        Ok(())
    }

    /// The preemption long-poll: waits up to `timeout_seconds` (HTTP timeout 10 s longer).
    pub async fn preemption(
        &self,
        allocation: &str,
        timeout_seconds: u64,
    ) -> Result<bool, DetError> {
        let path = format!(
            "api/v1/allocations/{allocation}/signals/preemption?timeout_seconds={timeout_seconds}"
        );
        let timeout = Duration::from_secs(timeout_seconds + 10);
        let resp: PreemptionResponse = self
            .call(Method::GET, &path, NO_BODY, true, Some(timeout))
            .await?;
        Ok(resp.preempt)
    }

    /// Acknowledges preemption (empty body).
    pub async fn ack_preemption(&self, allocation: &str) -> Result<(), DetError> {
        let path = format!("api/v1/allocations/{allocation}/signals/ack_preemption");
        let _: Value = self.call(Method::POST, &path, NO_BODY, true, None).await?;
        Ok(())
    }

    /// The current searcher operation.
    pub async fn searcher_operation(
        &self,
        trial: i32,
    ) -> Result<SearcherOperationResponse, DetError> {
        self.call(
            Method::GET,
            &format!("api/v1/trials/{trial}/searcher/operation"),
            NO_BODY,
            true,
            None,
        )
        .await
    }

    /// Reports progress in the searcher's units (batches done; a bare JSON number body), which
    /// the master divides by the operation's length.
    pub async fn report_progress(&self, trial: i32, progress: f64) -> Result<(), DetError> {
        let _: Value = self
            .call(
                Method::POST,
                &format!("api/v1/trials/{trial}/progress"),
                Body::Json(&progress),
                true,
                None,
            )
            .await?;
        Ok(())
    }

    /// Completes the searcher operation of `length` with `metric`.
    pub async fn complete_operation(
        &self,
        trial: i32,
        length: i64,
        metric: f64,
    ) -> Result<(), DetError> {
        let body = CompleteOperationRequest {
            op: json!({"length": length}),
            searcher_metric: json!(metric),
        };
        let path = format!("api/v1/trials/{trial}/searcher/completed_operation");
        let _: Value = self
            .call(Method::POST, &path, Body::Json(&body), true, None)
            .await?;
        Ok(())
    }
}
