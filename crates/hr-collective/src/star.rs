//! The all-gather through the chief: workers send their part, the chief answers each with every
//! part in rank order.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::frame::{MAX_FRAME, pack, read, unpack, write};
use crate::{CollectiveError, World, io};

/// How often a worker retries a chief that is not listening yet, and the chief looks for the
/// next worker, while they meet.
const RETRY: Duration = Duration::from_millis(50);

/// How long the chief waits for a connection's greeting before it drops it and listens on.
const GREETING_WAIT: Duration = Duration::from_secs(10);

/// Most bytes of a greeting: the world size and the build.
const MAX_GREETING: u64 = 4 + MAX_BUILD as u64;

/// Most bytes of the build a rank names.
const MAX_BUILD: usize = 256;

/// A connection idle this long is probed; unanswered probes (a host gone, a network cut) end
/// it within about two minutes, failing the exchange instead of waiting forever.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_PROBES: u32 = 6;

/// The connections of one rank: the chief holds one per worker (rank order), a worker one to
/// the chief.
#[derive(Debug)]
pub struct Star {
    rank: usize,
    size: usize,
    links: Vec<TcpStream>,
    /// The next exchange's sequence number (0 is the greeting).
    seq: u64,
}

impl Star {
    /// Meets the other ranks of `world`, every one started from `build` (a digest of the
    /// binary: ranks of other builds are refused, at most 256 bytes): the chief listens on its
    /// port (every interface) and takes one greeting from each worker, dropping connections
    /// that do not greet as a rank; a worker connects to `MASTER_ADDR`, retrying while the chief
    /// is not yet reachable. Gives up after `patience`. Once met, a rank waits for its peers as
    /// long as their connections live (TCP keepalive ends one whose host is gone).
    pub fn connect(
        world: &World,
        build: &str,
        patience: Duration,
    ) -> Result<Star, CollectiveError> {
        if build.len() > MAX_BUILD {
            return Err(CollectiveError::Protocol(format!(
                "a build name of {} bytes is over {MAX_BUILD}",
                build.len()
            )));
        }
        let deadline = Instant::now() + patience;
        let hello = greeting(world, build);
        let links = if world.is_chief() {
            accept_workers(world, &hello, deadline)?
        } else {
            vec![reach_chief(world, &hello, deadline)?]
        };
        for link in &links {
            link.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
            link.set_read_timeout(None)
                .map_err(io("clearing the greeting's timeout"))?;
            keep_alive(link).map_err(io("setting TCP keepalive"))?;
        }
        Ok(Star {
            rank: world.rank,
            size: world.size,
            links,
            seq: 1,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Every rank's `bytes`, in rank order. Every rank calls it the same number of times.
    pub fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, CollectiveError> {
        let seq = self.seq;
        self.seq += 1;
        if self.rank == 0 {
            let mut parts = Vec::with_capacity(self.size);
            parts.push(bytes);
            for (i, link) in self.links.iter_mut().enumerate() {
                let (_, part) = read(
                    link,
                    seq,
                    Some(i + 1),
                    MAX_FRAME,
                    &format!("rank {}", i + 1),
                )?;
                parts.push(part);
            }
            let packed = pack(&parts);
            for (i, link) in self.links.iter_mut().enumerate() {
                write(link, seq, 0, &packed, &format!("rank {}", i + 1))?;
            }
            Ok(parts)
        } else {
            let chief = &mut self.links[0];
            write(chief, seq, self.rank, &bytes, "the chief")?;
            let (_, packed) = read(chief, seq, Some(0), MAX_FRAME, "the chief")?;
            let parts = unpack(&packed, self.size)?;
            if parts[self.rank] != bytes {
                return Err(CollectiveError::Protocol(format!(
                    "the chief's gathered parts hold another part for rank {}",
                    self.rank
                )));
            }
            Ok(parts)
        }
    }
}

/// The greeting's bytes: the world size the rank was started with and its build.
fn greeting(world: &World, build: &str) -> Vec<u8> {
    let mut bytes = (world.size as u32).to_le_bytes().to_vec();
    bytes.extend_from_slice(build.as_bytes());
    bytes
}

/// Probes an idle connection, so a peer whose host is gone ends it.
fn keep_alive(link: &TcpStream) -> std::io::Result<()> {
    use rustix::net::sockopt;
    sockopt::set_socket_keepalive(link, true)?;
    sockopt::set_tcp_keepidle(link, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(link, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(link, KEEPALIVE_PROBES)?;
    Ok(())
}

/// Why a greeting of `peer` is not this world's: another size, or another build.
fn mismatch(hello: &[u8], ours: &[u8], peer: &str, world: &World) -> CollectiveError {
    let size = hello
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes);
    if size != Some(world.size as u32) {
        return CollectiveError::Protocol(format!(
            "{peer} runs a world of {} ranks; every rank must be started with WORLD_SIZE {}",
            size.map_or("an unknown number of".to_owned(), |n| n.to_string()),
            world.size
        ));
    }
    let build = |b: &[u8]| String::from_utf8_lossy(b.get(4..).unwrap_or_default()).into_owned();
    CollectiveError::Protocol(format!(
        "{peer} runs build {} but this rank {}: start every rank from the same binary",
        build(hello),
        build(ours)
    ))
}

fn accept_workers(
    world: &World,
    hello: &[u8],
    deadline: Instant,
) -> Result<Vec<TcpStream>, CollectiveError> {
    let port = world.port;
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(io(format!("listening for the other ranks on port {port}")))?;
    listener
        .set_nonblocking(true)
        .map_err(io("setting the listener non-blocking"))?;
    let mut links: Vec<Option<TcpStream>> = (1..world.size).map(|_| None).collect();
    while links.iter().any(Option::is_none) {
        let (mut stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (1..world.size)
                        .filter(|r| links[r - 1].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    return Err(CollectiveError::Protocol(format!(
                        "ranks {} did not connect to port {port} in time",
                        missing.join(", ")
                    )));
                }
                std::thread::sleep(RETRY);
                continue;
            }
            Err(e) => return Err(io("accepting a rank")(e)),
        };
        stream
            .set_nonblocking(false)
            .map_err(io("setting a rank's connection blocking"))?;
        stream
            .set_read_timeout(Some(GREETING_WAIT))
            .map_err(io("setting the greeting's timeout"))?;
        // Something that does not greet as a rank (a port scan, a health check) is dropped.
        let Ok((rank, greeted)) = read(&mut stream, 0, None, MAX_GREETING, &format!("{peer}"))
        else {
            continue;
        };
        if greeted != hello || rank == 0 || rank >= world.size {
            return Err(if greeted == hello {
                CollectiveError::Protocol(format!(
                    "{peer} greets as rank {rank}; ranks run from 1 to {}",
                    world.size - 1
                ))
            } else {
                mismatch(&greeted, hello, &format!("rank {rank} ({peer})"), world)
            });
        }
        if links[rank - 1].is_some() {
            return Err(CollectiveError::Protocol(format!(
                "two processes connected as rank {rank}"
            )));
        }
        write(&mut stream, 0, 0, hello, &format!("rank {rank}"))?;
        links[rank - 1] = Some(stream);
    }
    Ok(links.into_iter().flatten().collect())
}

fn reach_chief(
    world: &World,
    hello: &[u8],
    deadline: Instant,
) -> Result<TcpStream, CollectiveError> {
    let target = (world.chief_addr.as_str(), world.port);
    let what = format!("connecting to the chief at {}:{}", target.0, target.1);
    // Any failure is retried until the deadline: the chief's container may not be up, or its
    // name not yet resolvable.
    let mut stream = loop {
        match TcpStream::connect(target) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(RETRY),
            Err(e) => return Err(io(what)(e)),
        }
    };
    stream
        .set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(RETRY),
        ))
        .map_err(io("setting the greeting's timeout"))?;
    write(&mut stream, 0, world.rank, hello, "the chief")?;
    let (_, greeted) = read(&mut stream, 0, Some(0), MAX_GREETING, "the chief")?;
    if greeted != hello {
        return Err(mismatch(&greeted, hello, "the chief", world));
    }
    Ok(stream)
}
