//! `hessian-recipes devmaster` under a connection flood: more held-open connections than it has
//! file descriptors must neither stop it nor keep a login out for good.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::Duration,
};

use hr_tests::{Scratch, binary};

/// The devmaster's open-file limit in this test.
const NOFILE: usize = 128;

struct Master(Child);

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A whole login request, answered and closed.
fn login(addr: &str) -> String {
    let body = r#"{"username":"determined","password":"","isHashed":false}"#;
    let mut stream = TcpStream::connect(addr).expect("connect");
    // A bound on a hung master, not a timing assertion: a served login takes one header-read
    // timeout (10 s) per cap's worth of flood connections queued before it.
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    write!(
        stream,
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send login");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("the devmaster answers the login");
    answer
}

#[test]
fn a_flood_beyond_the_open_file_limit_neither_stops_the_devmaster_nor_keeps_a_login_out() {
    let s = Scratch::new();
    let state = s.path().join("state");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {NOFILE} && exec \"$0\" devmaster --listen 127.0.0.1:0 --state-dir \"$1\""
        ))
        .arg(binary())
        .arg(&state)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the devmaster");
    let stdout = child.stdout.take().expect("stdout");
    let mut master = Master(child);
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("read the URL line");
    let addr = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();

    // More connections than the devmaster has descriptors, each stuck in its request head.
    let flood: Vec<TcpStream> = (0..NOFILE)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).expect("flood connect");
            c.write_all(b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\n")
                .expect("partial head");
            c
        })
        .collect();

    let during = login(&addr);
    assert!(
        during.starts_with("HTTP/1.1 200") && during.contains("\"token\""),
        "a login behind the flood is served once the stuck heads time out: {during:?}"
    );
    drop(flood);
    let after = login(&addr);
    assert!(after.starts_with("HTTP/1.1 200"), "{after:?}");
    assert!(
        master.0.try_wait().expect("poll").is_none(),
        "the devmaster is still serving"
    );
}
