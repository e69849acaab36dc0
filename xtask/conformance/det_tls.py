"""Conformance of a devmaster serving HTTPS with a private CA's certificate.

Run by `cargo xtask conformance det` against a devmaster started with --tls-cert/--tls-key (a CA
made at test time). The real `det` trusts it through DET_MASTER_CERT_FILE and is refused with
another CA's bundle; a Python Core API trial and our Rust Core trial run the pause/activate
lifecycle through TLS with the certificate the master hands them; `hessian-recipes qualify
managed --master https://...` signs in with the token `det user login` cached and qualifies a plan
through TLS (its `managed-training` trials trusting the handed certificate), and with another
CA's bundle it is refused naming the certificate problem and DET_MASTER_CERT_FILE. Prints
`det-tls: N passed, M failed` last.
"""
import json
import pathlib
import subprocess

import det_cli
from det_cli import Det, check, driver_parser, finish, lifecycle


def main():
    p = driver_parser()
    p.add_argument("--hessian-recipes", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--wrong-ca", required=True)
    p.add_argument("--requests", type=pathlib.Path, required=True)
    p.add_argument("--work", type=pathlib.Path, required=True)
    args = p.parse_args()
    det = Det(args)
    # `requests` lets these override the bundle `det` gives its session (DET_MASTER_CERT_FILE).
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        det.env.pop(var, None)
    det.env["DET_MASTER_CERT_FILE"] = args.ca
    wrong = dict(det.env, DET_MASTER_CERT_FILE=args.wrong_ca)
    check("the master URL is https", args.master.startswith("https://"), args.master)

    out = subprocess.run([args.det, "-m", args.master, "user", "login", "determined"], input="\n",
                         capture_output=True, text=True, env=wrong, timeout=120)
    check("det with another CA's bundle is refused: certificate verify failed",
          out.returncode != 0 and "certificate verify failed" in (out.stdout + out.stderr).lower(),
          out.stdout + out.stderr)
    out = det("user", "login", "determined", stdin="\n")
    check("det user login through TLS with DET_MASTER_CERT_FILE", out.returncode == 0, out.stdout + out.stderr)
    out = det("user", "whoami")
    check("det user whoami through TLS", "determined" in out.stdout, out.stdout + out.stderr)

    script = str(pathlib.Path(det_cli.__file__).with_name("core_trial.py"))
    lifecycle(det, args, "python-tls", [args.python, script])
    lifecycle(det, args, "rust-tls", [args.rust_trial])

    def qualify(env, output):
        return subprocess.run([args.hessian_recipes, "qualify", "managed", "--plan", args.plan, "--output",
                               str(args.work / output), "--master", args.master, "--timeout-seconds", "600"],
                              capture_output=True, text=True, env=env, timeout=900)

    out = qualify(wrong, "qualify-wrong-ca")
    check("qualify managed with another CA's bundle is refused, naming the problem and DET_MASTER_CERT_FILE",
          out.returncode != 0 and "UnknownIssuer" in out.stderr and "DET_MASTER_CERT_FILE" in out.stderr
          and "cannot trust the master" in out.stderr, out.stderr[-2000:])
    out = qualify(det.env, "qualify-tls")
    proof_file = args.work / "qualify-tls" / "managed-proof.json"
    proof = json.loads(proof_file.read_text()) if proof_file.is_file() else {}
    check("qualify managed --master https://... qualifies the plan through TLS",
          out.returncode == 0 and proof.get("equal") is True, out.stderr[-3000:])
    logins = [r for r in map(json.loads, args.requests.read_text().splitlines())
              if r["method"] == "POST" and r["path"] == "/api/v1/auth/login"]
    check("hessian-recipes signed in with the token det cached (det's one login, no other)",
          len(logins) == 1, logins)

    finish("det-tls")


if __name__ == "__main__":
    main()
