//! How to launch the real servers we support, as [`ServiceSpec`]s: an OpenEnv environment's ASGI
//! app (uvicorn from the folder holding its package, `echo_env.server.app:app` for the
//! environment `openenv init echo_env` generates) and a NeMo Gym resources server from its
//! folder (`resources_servers/<name>/`, run directly, without Ray or the head server).

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::ServiceSpec;

/// Stands for the port in a config written as JSON until `{port}` is filled in.
const PORT_TOKEN: &str = "hr-bridge-port";

/// The OpenEnv echo environment's app, as `openenv init echo_env` generates it.
pub const OPENENV_ECHO_APP: &str = "echo_env.server.app:app";

/// An OpenEnv environment's ASGI `app` (`MODULE:ATTRIBUTE`, e.g. [`OPENENV_ECHO_APP`]), served
/// by uvicorn from `env_root`, the folder holding the environment's package.
pub fn openenv(python: &Path, env_root: &Path, app: &str, log_path: &Path) -> ServiceSpec {
    ServiceSpec {
        name: "openenv".into(),
        program: python.to_owned(),
        args: [
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ]
        .map(String::from)
        .to_vec(),
        cwd: env_root.to_owned(),
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        log_path: log_path.to_owned(),
        ready_path: "/health".into(),
        ready_timeout: Duration::from_secs(180),
        grace: Duration::from_secs(10),
        attempts: 3,
        first_port: None,
    }
}

/// The NeMo Gym resources server in `server_dir` (`resources_servers/<name>/`, holding its
/// `app.py`), configured as NeMo Gym's own configs name it: an instance called `<name>` with a
/// `resources_servers.<name>` entry. The name is the folder's.
pub fn nemo_resources_server(
    python: &Path,
    server_dir: &Path,
    server_config: &serde_json::Map<String, serde_json::Value>,
    log_path: &Path,
) -> ServiceSpec {
    let name = server_dir.file_name().map_or_else(
        || "resources_server".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    // The config is the instance block (the server's own fields, then where it runs) plus the
    // keys the server reads (`head_server`, `dry_run`), as JSON, which NeMo Gym's YAML reads.
    let mut instance = server_config.clone();
    instance.extend([
        ("entrypoint".to_owned(), json!("app.py")),
        ("host".to_owned(), json!("127.0.0.1")),
        ("port".to_owned(), json!(PORT_TOKEN)),
        ("domain".to_owned(), json!("agent")),
    ]);
    let mut servers = serde_json::Map::new();
    servers.insert(name.clone(), serde_json::Value::Object(instance));
    let mut config = serde_json::Map::new();
    config.insert(
        "head_server".to_owned(),
        json!({"host": "127.0.0.1", "port": 11000}),
    );
    config.insert("dry_run".to_owned(), json!(false));
    config.insert(name.clone(), json!({ "resources_servers": servers }));
    let config = serde_json::Value::Object(config)
        .to_string()
        // The port, a number once `{port}` is filled in.
        .replace(&format!("\"{PORT_TOKEN}\""), "{port}");
    ServiceSpec {
        name: "nemo-gym".into(),
        program: python.to_owned(),
        args: vec!["app.py".into()],
        cwd: server_dir.to_owned(),
        env: vec![
            ("NEMO_GYM_CONFIG_DICT".into(), config),
            ("NEMO_GYM_CONFIG_PATH".into(), name),
            // The folder itself, and the one holding `resources_servers/` (a NeMo Gym checkout
            // or site-packages), so `app.py` imports its siblings either way.
            ("PYTHONPATH".into(), python_path(server_dir)),
            ("PYTHONUNBUFFERED".into(), "1".into()),
        ],
        log_path: log_path.to_owned(),
        ready_path: "/".into(),
        ready_timeout: Duration::from_secs(240),
        grace: Duration::from_secs(5),
        attempts: 3,
        first_port: None,
    }
}

fn python_path(server_dir: &Path) -> String {
    let mut paths = vec![server_dir.display().to_string()];
    if let Some(above) = server_dir.parent().and_then(Path::parent) {
        paths.push(above.display().to_string());
    }
    paths.join(":")
}
