//! The `hessian-recipes` binary: everything lives in the library; see `hessian_recipes::main`.

use std::os::unix::process::CommandExt;

/// Tensors of hundreds of MiB are allocated and freed every step: mimalloc keeps and reuses
/// them where glibc would unmap and fault them in again.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's option for how long freed memory stays mapped; `-1` keeps it for reuse (by default
/// it is returned after 10 ms, and the next step's tensors fault every page in again: a SmolLM2
/// loss forward takes twice as long).
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// Stack size of the pool's threads: what Linux gives a main thread by default.
const MAIN_STACK: usize = 8 << 20;

fn main() -> std::process::ExitCode {
    // mimalloc reads its options from the environment before `main` runs, so the setting takes
    // effect by running this same program again with it (same process id, arguments and
    // environment otherwise). If that is impossible the run goes on with mimalloc's defaults.
    if std::env::var_os(PURGE_DELAY).is_none()
        && let Ok(exe) = std::env::current_exe()
    {
        let mut args = std::env::args_os();
        let mut again = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            again.arg0(arg0);
        }
        let _exec_failed = again.args(args).env(PURGE_DELAY, "-1").exec();
    }
    // The work runs on a thread of the rayon pool that the CPU backend's matrix products split
    // across (`RAYON_NUM_THREADS` threads, default one per core). From a pool thread, a split
    // product runs one half itself and takes the other back if no idle thread has started it;
    // from the main thread it would sleep until a pool thread had woken and finished both: with
    // thousands of products per GRPO step, a third of a decode step went to those waits. Where
    // no pool can be made, the work runs here as before. Pool threads get the main thread's
    // usual stack.
    match rayon::ThreadPoolBuilder::new()
        .stack_size(MAIN_STACK)
        .build()
    {
        Ok(pool) => pool.install(hessian_recipes::main),
        Err(_) => hessian_recipes::main(),
    }
}
