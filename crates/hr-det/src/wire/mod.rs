//! grpc-gateway wire types of Determined 0.35 (`runtime.JSONPb{EmitDefaults: true}`): field names
//! in lowerCamelCase, int64 values as JSON strings, enums as `STATE_*` names, RFC 3339 times.
//! Only the fields we use or the Python client requires; unknown fields are tolerated on input.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// int64/uint64 as grpc-gateway writes them (a JSON string); numbers are accepted on input.
pub mod int64_string {
    use super::*;

    /// Serialises as a string.
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    /// Accepts a string or a number.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => s.parse().map_err(serde::de::Error::custom),
            Value::Number(n) => n
                .as_i64()
                .ok_or_else(|| serde::de::Error::custom("not an int64")),
            other => Err(serde::de::Error::custom(format!(
                "expected an int64, got {other}"
            ))),
        }
    }
}

/// Map values that are int64 strings (checkpoint `resources`).
pub mod int64_string_map {
    use super::*;

    /// Serialises values as strings.
    pub fn serialize<S: Serializer>(v: &BTreeMap<String, i64>, s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&String, String> = v.iter().map(|(k, v)| (k, v.to_string())).collect();
        m.serialize(s)
    }

    /// Accepts strings or numbers.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, i64>, D::Error> {
        let raw: BTreeMap<String, Value> = BTreeMap::deserialize(d)?;
        raw.into_iter()
            .map(|(k, v)| {
                let n = match &v {
                    Value::String(s) => s.parse().ok(),
                    Value::Number(n) => n.as_i64(),
                    _ => None,
                };
                n.map(|n| (k, n)).ok_or_else(|| {
                    serde::de::Error::custom(format!("resource size {v} is not an int64"))
                })
            })
            .collect()
    }
}

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(
                #[doc = $wire]
                #[serde(rename = $wire)]
                $variant,
            )+
        }
        impl $name {
            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire,)+ }
            }
        }
    };
}

wire_enum!(
    /// experimentv1State (trialv1State is the same minus the delete states).
    State {
        Unspecified = "STATE_UNSPECIFIED",
        Active = "STATE_ACTIVE",
        Paused = "STATE_PAUSED",
        StoppingCompleted = "STATE_STOPPING_COMPLETED",
        StoppingCanceled = "STATE_STOPPING_CANCELED",
        StoppingError = "STATE_STOPPING_ERROR",
        Completed = "STATE_COMPLETED",
        Canceled = "STATE_CANCELED",
        Error = "STATE_ERROR",
        Deleted = "STATE_DELETED",
        Deleting = "STATE_DELETING",
        DeleteFailed = "STATE_DELETE_FAILED",
        StoppingKilled = "STATE_STOPPING_KILLED",
        Queued = "STATE_QUEUED",
        Pulling = "STATE_PULLING",
        Starting = "STATE_STARTING",
        Running = "STATE_RUNNING",
    }
);

impl State {
    /// Whether the state is terminal (no further transitions).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Canceled | Self::Error | Self::Deleted
        )
    }
}

wire_enum!(
    /// taskv1State (commands).
    TaskState {
        Unspecified = "STATE_UNSPECIFIED",
        Pulling = "STATE_PULLING",
        Starting = "STATE_STARTING",
        Running = "STATE_RUNNING",
        Terminated = "STATE_TERMINATED",
        Terminating = "STATE_TERMINATING",
        Waiting = "STATE_WAITING",
        Queued = "STATE_QUEUED",
    }
);

wire_enum!(
    /// checkpointv1State.
    CheckpointState {
        Unspecified = "STATE_UNSPECIFIED",
        Active = "STATE_ACTIVE",
        Completed = "STATE_COMPLETED",
        Error = "STATE_ERROR",
        Deleted = "STATE_DELETED",
        PartiallyDeleted = "STATE_PARTIALLY_DELETED",
    }
);

wire_enum!(
    /// Checkpoint listing sort keys.
    CheckpointSortBy {
        Unspecified = "SORT_BY_UNSPECIFIED",
        Uuid = "SORT_BY_UUID",
        TrialId = "SORT_BY_TRIAL_ID",
        BatchNumber = "SORT_BY_BATCH_NUMBER",
        EndTime = "SORT_BY_END_TIME",
        State = "SORT_BY_STATE",
        SearcherMetric = "SORT_BY_SEARCHER_METRIC",
    }
);

/// The error envelope: `{"error":{"code":<grpc code>,"reason":"NotFound","error":"<message>"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// The envelope's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// gRPC status code.
    pub code: i32,
    /// gRPC status name.
    pub reason: String,
    /// Message.
    pub error: String,
}

/// `GET /info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MasterInfo {
    /// Master version, e.g. `0.35.0`.
    pub version: String,
    /// Cluster id.
    pub cluster_id: String,
    /// Master id.
    pub master_id: String,
    /// Cluster name.
    #[serde(default)]
    pub cluster_name: String,
}

/// `POST /api/v1/auth/login` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginRequest {
    /// User name.
    pub username: String,
    /// Hashed password (see [`crate::hash_password`]).
    pub password: String,
    /// Whether `password` is already hashed (always true from the Python client; optional on
    /// the wire, false when absent, as the master reads it).
    #[serde(default)]
    pub is_hashed: bool,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// Id.
    #[serde(default)]
    pub id: i32,
    /// Name.
    pub username: String,
    /// Admin flag.
    pub admin: bool,
    /// Active flag.
    pub active: bool,
    /// Display name.
    #[serde(default)]
    pub display_name: String,
}

/// `POST /api/v1/auth/login` response.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct LoginResponse {
    /// The session token.
    pub token: String,
    /// The user.
    pub user: User,
}

impl std::fmt::Debug for LoginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginResponse")
            .field("token", &"<redacted>")
            .field("user", &self.user)
            .finish()
    }
}

/// `GET /api/v1/me`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeResponse {
    /// The user.
    pub user: User,
}

/// v1File of a model definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct File {
    /// Relative path.
    pub path: String,
    /// Tar type flag (48 file, 53 dir).
    #[serde(rename = "type")]
    pub kind: i32,
    /// Base64 content.
    pub content: String,
    /// Mode bits.
    pub mode: i32,
    /// Modification time, seconds.
    #[serde(with = "int64_string")]
    pub mtime: i64,
    /// Owner uid.
    pub uid: i32,
    /// Owner gid.
    pub gid: i32,
}

/// Pagination of list responses (`endIndex` and `total` are required by the Python client).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    /// Offset asked.
    #[serde(default)]
    pub offset: i32,
    /// Limit asked.
    #[serde(default)]
    pub limit: i32,
    /// First index.
    #[serde(default)]
    pub start_index: i32,
    /// One past the last index.
    pub end_index: i32,
    /// Total items.
    pub total: i32,
}

mod checkpoints;
mod cluster;
mod commands;
mod experiments;
mod trial;

pub use checkpoints::*;
pub use cluster::*;
pub use commands::*;
pub use experiments::*;
pub use trial::*;
