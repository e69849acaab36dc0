//! The all-gather through the chief: workers send their part, the chief answers each with every
//! part in rank order.

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::frame::{pack, read, unpack, write};
use crate::{CollectiveError, World, io};

/// How often a worker retries a chief that is not listening yet, and the chief looks for the
/// next worker, while they meet.
const RETRY: Duration = Duration::from_millis(50);

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
    /// Meets the other ranks of `world`: the chief listens on its port (every interface) and
    /// takes one greeting from each worker; a worker connects to `MASTER_ADDR`, retrying while
    /// the chief is not yet listening. Gives up after `patience`. Once met, a rank that waits
    /// longer than `idle` for a peer's next frame fails (`None`: it waits as long as the peer's
    /// connection lives).
    pub fn connect(
        world: &World,
        patience: Duration,
        idle: Option<Duration>,
    ) -> Result<Star, CollectiveError> {
        let deadline = Instant::now() + patience;
        let links = if world.is_chief() {
            accept_workers(world, deadline)?
        } else {
            vec![reach_chief(world, deadline)?]
        };
        for link in &links {
            link.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
            link.set_read_timeout(idle)
                .map_err(io("setting the read timeout"))?;
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
                let (_, part) = read(link, seq, Some(i + 1), &format!("rank {}", i + 1))?;
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
            let (_, packed) = read(chief, seq, Some(0), "the chief")?;
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

/// The greeting's bytes: the world size the rank was started with.
fn greeting(world: &World) -> Vec<u8> {
    (world.size as u32).to_le_bytes().to_vec()
}

fn accept_workers(world: &World, deadline: Instant) -> Result<Vec<TcpStream>, CollectiveError> {
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
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(RETRY),
            ))
            .map_err(io("setting the greeting's timeout"))?;
        let (rank, hello) = read(&mut stream, 0, None, &format!("{peer}"))?;
        if hello != greeting(world) || rank == 0 || rank >= world.size {
            return Err(CollectiveError::Protocol(format!(
                "{peer} greets as rank {rank} of a world of another size; every rank must be \
                 started with WORLD_SIZE {}",
                world.size
            )));
        }
        if links[rank - 1].is_some() {
            return Err(CollectiveError::Protocol(format!(
                "two processes connected as rank {rank}"
            )));
        }
        write(&mut stream, 0, 0, &greeting(world), &format!("rank {rank}"))?;
        links[rank - 1] = Some(stream);
    }
    Ok(links.into_iter().flatten().collect())
}

fn reach_chief(world: &World, deadline: Instant) -> Result<TcpStream, CollectiveError> {
    let target = (world.chief_addr.as_str(), world.port);
    let what = format!("connecting to the chief at {}:{}", target.0, target.1);
    let mut stream = loop {
        match TcpStream::connect(target) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() < deadline => {
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut
                ) {
                    return Err(io(what)(e));
                }
                std::thread::sleep(RETRY);
            }
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
    write(&mut stream, 0, world.rank, &greeting(world), "the chief")?;
    let (_, hello) = read(&mut stream, 0, Some(0), "the chief")?;
    if hello != greeting(world) {
        return Err(CollectiveError::Protocol(format!(
            "the chief runs a world of another size than this rank's WORLD_SIZE {}",
            world.size
        )));
    }
    Ok(stream)
}
