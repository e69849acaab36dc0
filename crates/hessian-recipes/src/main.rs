//! The `hessian-recipes` binary: everything lives in the library; see `hessian_recipes::main`.

fn main() -> std::process::ExitCode {
    hessian_recipes::main()
}
