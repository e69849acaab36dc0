//! Sign-in: `/info`, login, logout, `me`, and the endpoints answered with an empty body.

use axum::{Json, body::Bytes, extract::State as AxState, http::HeaderMap};
use serde_json::{Value, json};

use hr_det::wire::{MasterInfo, User};

use super::{Caller, M, parse, token, with_cli_fields};
use crate::{
    error::{ApiError, ApiResult},
    info::{now_rfc3339, random_hex},
    state::LOGIN_LIFETIME_SECS,
};

pub(super) async fn info(AxState(m): M) -> Json<Value> {
    let cluster = m.state().cluster_id.clone();
    Json(with_cli_fields(
        &MasterInfo {
            version: "0.35.0".to_owned(),
            cluster_id: cluster.clone(),
            master_id: cluster,
            cluster_name: "devmaster".to_owned(),
        },
        json!({"telemetryEnabled": false, "branding": "determined", "rbacEnabled": false,
                "strictJobQueueControl": false}),
    ))
}

/// A user as the Rust client reads it (`hr_det::wire::User`) plus the `det` CLI's fields.
pub(super) fn user_json(name: &str) -> Value {
    let user = User {
        id: if name == "admin" { 1 } else { 2 },
        username: name.to_owned(),
        admin: name == "admin",
        active: true,
        display_name: String::new(),
    };
    with_cli_fields(
        &user,
        json!({"remote": false, "modifiedAt": now_rfc3339(), "agentUserGroup": null}),
    )
}

/// How long a failed login waits before its answer.
const FAILED_LOGIN_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// How many failed logins may wait for their answer at once.
const MAX_FAILED_WAITING: usize = 32;

pub(super) async fn login(AxState(m): M, body: Bytes) -> ApiResult<Json<Value>> {
    let req: hr_det::wire::LoginRequest = parse(&body)?;
    // The users of a fresh Determined master, `determined` and `admin`, with empty passwords
    // (loopback only) or the configured one.
    let password = m.config.password.as_deref().unwrap_or("");
    let expected = if req.is_hashed {
        hr_det::hash_password(password)
    } else {
        password.to_owned()
    };
    // With this many failures waiting, no login is answered (not even a right one, which
    // would tell a guesser it was right sooner than the queue): a flood holds no connection long.
    if m.failed_logins.waiting() >= MAX_FAILED_WAITING {
        return Err(ApiError::Unauthenticated(
            "too many failed sign-ins are waiting: retry in a minute".into(),
        ));
    }
    if !matches!(req.username.as_str(), "determined" | "admin") || req.password != expected {
        // Failed logins are answered one at a time, each after a delay: guessing a password
        // goes at one try a second, however many connections ask.
        let _turn = m.failed_logins.turn().await;
        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
        return Err(ApiError::Unauthenticated("invalid credentials".into()));
    }
    let token = random_hex(24);
    let mut state = m.state();
    state.add_login(&token, &req.username, LOGIN_LIFETIME_SECS);
    m.persist(state);
    Ok(Json(
        json!({"token": token, "user": user_json(&req.username)}),
    ))
}

/// Revokes the request's token: later requests with it are refused.
pub(super) async fn logout(
    AxState(m): M,
    _caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let mut state = m.state();
    state.remove_session(token(&headers)?);
    m.persist(state);
    Ok(Json(json!({})))
}

pub(super) async fn me(caller: Caller) -> ApiResult<Json<Value>> {
    let name = caller.user;
    Ok(Json(json!({"user": user_json(&name)})))
}

pub(super) async fn ok_body(_caller: Caller) -> ApiResult<Json<Value>> {
    Ok(Json(json!({})))
}
