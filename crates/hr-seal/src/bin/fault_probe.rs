//! Fault-injection probe for the seal tests: writes one snapshot of `--size` bytes at `--step`
//! into the store `--store` and, when `--fault STAGE` is given, SIGKILLs itself at that stage
//! (a real process kill, not a mock). Prints `sealed <manifest sha256>` on success. Not a user tool.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{path::PathBuf, process::ExitCode};

use hr_seal::{RunIdentity, SourceBinding, Stage, Store};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(store), Some(step)) = (
        arg(&args, "--store"),
        arg(&args, "--step").and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!(
            "usage: hr-seal-fault-probe --store DIR --step N [--size BYTES] [--fault STAGE] [--run ID]"
        );
        return ExitCode::from(2);
    };
    let size: usize = arg(&args, "--size")
        .and_then(|s| s.parse().ok())
        .unwrap_or(4096);
    let fault = arg(&args, "--fault")
        .map(|f| Stage::from_name(&f).unwrap_or_else(|| panic!("unknown stage {f}")));
    let run = RunIdentity {
        run_id: arg(&args, "--run").unwrap_or_else(|| "probe-run".into()),
        writer: format!("pid-{}", std::process::id()),
    };
    let result = (|| {
        let store = Store::open(&PathBuf::from(store))?;
        let source = SourceBinding {
            commit: "probe".into(),
            tree_sha256: None,
            cargo_lock_sha256: None,
            binary_sha256: None,
        };
        let mut writer =
            store
                .writer(run, step, source, "config".into())?
                .with_hook(move |stage| {
                    if Some(stage) == fault {
                        let _ = rustix::process::kill_process(
                            rustix::process::getpid(),
                            rustix::process::Signal::KILL,
                        );
                    }
                });
        let payload: Vec<u8> = (0..size)
            .map(|i| (i as u64).wrapping_mul(step.wrapping_add(7)) as u8)
            .collect();
        writer.add_bytes("payload/adapter/adapter.bin", "adapter", &payload)?;
        writer.add_bytes(
            "payload/trainer/trainer_state.json",
            "trainer",
            format!("{{\"step\": {step}}}").as_bytes(),
        )?;
        let staged = writer.seal(None)?;
        let (_, head) = store.publish(staged)?;
        Ok::<_, hr_seal::SealError>(head)
    })();
    match result {
        Ok(head) => {
            println!("sealed {}", head.manifest_sha256);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
