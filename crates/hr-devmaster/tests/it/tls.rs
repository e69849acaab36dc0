//! The devmaster over HTTPS with a private CA's certificate: clients trust it as `det` does (the
//! CA's bundle, `noverify`, a certificate name), a wrong or missing CA and a wrong name are refused
//! with the problem and the variable that fixes it, bad `--tls-*` files are refused at start, and
//! a trial is handed the https URL and the master's certificate.

use std::time::Duration;

use hr_det::{Client, DetError, MasterTrust};
use hr_devmaster::{Devmaster, DevmasterConfig, TlsFiles};
use hr_tests::private_ca::{PrivateCa, ServerCert};

fn config(dir: &std::path::Path, cert: &ServerCert) -> DevmasterConfig {
    DevmasterConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: dir.join("state"),
        trial_info: hr_devmaster::TrialInfo::Private,
        preemption_timeout: Duration::from_secs(60),
        record_requests: None,
        password: None,
        tls: Some(TlsFiles {
            cert: cert.chain.clone(),
            key: cert.key.clone(),
        }),
        slots: 0,
    }
}

async fn login(url: &str, trust: MasterTrust) -> Result<Client, DetError> {
    let mut client = Client::with_trust(url, trust)?.with_retry(hr_det::RetryPolicy {
        attempts: 1,
        ..Default::default()
    });
    client.login("determined", "").await?;
    Ok(client)
}

#[tokio::test]
async fn clients_trust_the_private_ca_and_refuse_anything_else_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = PrivateCa::new(tmp.path(), "cluster");
    let cert = ca.issue("master", &["localhost", "127.0.0.1"]);
    let master = Devmaster::start(config(tmp.path(), &cert))
        .await
        .expect("starts with TLS");
    let url = master.url().to_owned();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    let trusted = MasterTrust::from_pem_file(&ca.ca_pem).expect("bundle");
    let client = login(&url, trusted.clone()).await.expect("the CA's bundle");
    assert_eq!(client.me().await.expect("me").username, "determined");
    login(&url, MasterTrust::noverify())
        .await
        .expect("noverify trusts anything");
    login(&url, trusted.clone().with_name(Some("localhost")))
        .await
        .expect("a name the certificate holds");

    // No CA, or another cluster's CA: refused at once, naming the problem and the fix.
    let other = PrivateCa::new(tmp.path(), "other");
    for (trust, trusted_text) in [
        (MasterTrust::default(), "web PKI roots only".to_owned()),
        (
            MasterTrust::from_pem_file(&other.ca_pem).expect("bundle"),
            other.ca_pem.display().to_string(),
        ),
    ] {
        let err = login(&url, trust).await.expect_err("refused");
        let text = err.to_string();
        assert!(matches!(err, DetError::Tls { .. }), "{err:?}");
        for part in [
            "UnknownIssuer",
            "DET_MASTER_CERT_FILE",
            trusted_text.as_str(),
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
    let err = login(&url, trusted.with_name(Some("elsewhere.example")))
        .await
        .expect_err("a name the certificate does not hold");
    assert!(err.to_string().contains("DET_MASTER_CERT_NAME"), "{err}");
    master.shutdown();
}

#[tokio::test]
async fn a_certificate_issued_to_another_name_is_reached_through_the_cert_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = PrivateCa::new(tmp.path(), "cluster");
    let cert = ca.issue("master", &["master.cluster.internal"]);
    let master = Devmaster::start(config(tmp.path(), &cert))
        .await
        .expect("starts");
    let trusted = MasterTrust::from_pem_file(&ca.ca_pem).expect("bundle");
    let err = login(master.url(), trusted.clone())
        .await
        .expect_err("127.0.0.1 is not the certificate's name");
    assert!(
        err.to_string().contains("set DET_MASTER_CERT_NAME"),
        "{err}"
    );
    let client = login(
        master.url(),
        trusted.with_name(Some("master.cluster.internal")),
    )
    .await
    .expect("verified against the name, connected to the URL's address");
    assert_eq!(client.master(), master.url(), "errors still name the URL");
    master.shutdown();
}

#[tokio::test]
async fn bad_tls_files_are_refused_at_start_naming_the_flag() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = PrivateCa::new(tmp.path(), "cluster");
    let cert = ca.issue("master", &["127.0.0.1"]);
    let other = ca.issue("other", &["127.0.0.1"]);
    let junk = tmp.path().join("junk.pem");
    std::fs::write(&junk, "not PEM").expect("write");
    for (chain, key, flag) in [
        (
            tmp.path().join("absent.pem"),
            cert.key.clone(),
            "--tls-cert",
        ),
        (junk.clone(), cert.key.clone(), "--tls-cert"),
        (cert.chain.clone(), junk, "--tls-key"),
        (cert.chain.clone(), other.key, "--tls-key"),
    ] {
        let err = Devmaster::start(config(tmp.path(), &ServerCert { chain, key }))
            .await
            .err()
            .expect("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().starts_with(flag), "{flag}: {err}");
    }
    assert!(
        !tmp.path().join("state").exists(),
        "a refused start leaves no state folder"
    );
}

#[tokio::test]
async fn a_trial_gets_the_https_url_and_the_masters_certificate() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = PrivateCa::new(tmp.path(), "cluster");
    let cert = ca.issue("master", &["127.0.0.1"]);
    let master = Devmaster::start(config(tmp.path(), &cert))
        .await
        .expect("starts");
    let trusted = MasterTrust::from_pem_file(&ca.ca_pem).expect("bundle");
    let client = login(master.url(), trusted).await.expect("login");
    // The trial prints what it was handed, and checks the cluster file names the same file.
    let script = "echo \"master=$DET_MASTER tls=$DET_USE_TLS\"; \
                  cmp \"$DET_MASTER_CERT_FILE\" \"$CHAIN\" && echo cert-equal; \
                  grep -q \"\\\"master_cert_file\\\":\\\"$DET_MASTER_CERT_FILE\\\"\" \"$HR_DET_INFO_DIR/cluster.json\" && echo info-names-it";
    let yaml = format!(
        "{}environment: {{environment_variables: [CHAIN={}]}}\n",
        crate::support::config(script, 0),
        cert.chain.display()
    );
    let trial = crate::support::create_trial(&client, &yaml).await;
    crate::support::eventually("the trial ends", || async {
        client
            .list_trials(trial.experiment_id)
            .await
            .is_ok_and(|t| t.trials[0].state == hr_det::wire::State::Completed)
    })
    .await;
    let log: String = std::fs::read_dir(tmp.path().join("state/logs"))
        .expect("logs")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    for line in [
        format!("master={} tls=true", master.url()),
        "cert-equal".to_owned(),
        "info-names-it".to_owned(),
    ] {
        assert!(log.contains(&line), "{line:?} in {log}");
    }
    master.shutdown();
}

#[tokio::test]
async fn an_expired_certificate_is_named_at_start() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ca = PrivateCa::new(tmp.path(), "cluster");
    let expired = ca.issue_expired("old", &["127.0.0.1"]);
    let master = Devmaster::start(config(tmp.path(), &expired))
        .await
        .expect("an expired certificate is served, and said to be");
    let said = master.tls_expiry().unwrap_or_default().to_owned();
    assert!(
        said.starts_with("--tls-cert") && said.contains("expired on") && said.contains("renew"),
        "{said}"
    );
    master.shutdown();
    let fresh = ca.issue("master", &["127.0.0.1"]);
    let master = Devmaster::start(config(&tmp.path().join("b"), &fresh))
        .await
        .expect("start");
    assert_eq!(master.tls_expiry(), None);
    master.shutdown();
}
