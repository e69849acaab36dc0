//! Errors as the master returns them: grpc-gateway's status mapping and envelope.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::json;

/// A request failure with its gRPC code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Internal(String),
    /// A non-status error (e.g. a database constraint): grpc-gateway answers `Unknown` / 500.
    #[error("{0}")]
    Unknown(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, i32, &'static str) {
        match self {
            Self::InvalidArgument(_) => (StatusCode::BAD_REQUEST, 3, "InvalidArgument"),
            Self::FailedPrecondition(_) => (StatusCode::BAD_REQUEST, 9, "FailedPrecondition"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, 5, "NotFound"),
            Self::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, 16, "Unauthenticated"),
            Self::PermissionDenied(_) => (StatusCode::FORBIDDEN, 7, "PermissionDenied"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, 13, "Internal"),
            Self::Unknown(_) => (StatusCode::INTERNAL_SERVER_ERROR, 2, "Unknown"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, reason) = self.parts();
        (
            status,
            Json(json!({"error": {"code": code, "reason": reason, "error": self.to_string()}})),
        )
            .into_response()
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
