//! A devmaster on a free loopback port with a temp state folder, and a logged-in client.

use std::{path::Path, time::Duration};

use hr_det::Client;
use hr_devmaster::{Devmaster, DevmasterConfig};

/// A loopback devmaster on a free port with state in `state_dir`: each trial its own info
/// folder, no password, no TLS, no slots.
pub(crate) fn default_config(state_dir: &Path) -> DevmasterConfig {
    DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: state_dir.to_owned(),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: None,
        password: None,
        tls: None,
        slots: 0,
    }
}

/// Starts a devmaster with `config`; returns it and a client signed in as `determined`.
pub(crate) async fn start_with(config: DevmasterConfig) -> (Devmaster, Client) {
    let master = Devmaster::start(config).await.expect("devmaster starts");
    let mut client = Client::new(master.url()).expect("client");
    client.login("determined", "").await.expect("login");
    (master, client)
}

pub(crate) async fn start(state_dir: &Path, preemption_timeout: Duration) -> (Devmaster, Client) {
    start_with(DevmasterConfig {
        preemption_timeout,
        ..default_config(state_dir)
    })
    .await
}

/// Creates and activates an experiment from `yaml`; returns its one trial.
pub(crate) async fn create_trial(client: &Client, yaml: &str) -> hr_det::wire::Trial {
    let exp = client
        .create_experiment(yaml, None, true)
        .await
        .expect("create");
    client
        .list_trials(exp.experiment.id)
        .await
        .expect("trials")
        .trials
        .remove(0)
}

/// An experiment config whose trial runs `script` with `sh -c`.
pub(crate) fn config(script: &str, max_restarts: u32) -> String {
    format!(
        "name: t\nentrypoint: {script:?}\nsearcher: {{name: single, metric: loss, max_length: {{batches: 4}}}}\n\
         resources: {{slots_per_trial: 0}}\nmax_restarts: {max_restarts}\n"
    )
}

/// Polls `f` every 50 ms for up to 2 minutes (a bound on a hung test, generous for a loaded
/// machine; nothing relies on how soon).
pub(crate) async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..2400 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Sends `head` (request line and headers, without Content-Length) and `body` on a fresh
/// connection; returns the whole response.
pub(crate) async fn raw_response(addr: &str, head: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    response
}

/// Signs in as `determined` over raw HTTP; returns the token.
pub(crate) async fn login_token(addr: &str) -> String {
    let login = raw_response(
        addr,
        &format!("POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}"),
        r#"{"username":"determined","password":""}"#,
    )
    .await;
    let answer: serde_json::Value =
        serde_json::from_str(login.split("\r\n\r\n").nth(1).unwrap_or("")).expect("login answer");
    answer["token"].as_str().expect("token").to_owned()
}
