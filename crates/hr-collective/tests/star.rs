//! Ranks meet on loopback and all-gather; a rank that dies makes the others fail, not hang; a
//! connection that is not a rank is dropped, and a rank of another world size or build refused.

use std::time::Duration;

use hr_collective::{Star, World};

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn world(rank: usize, size: usize, port: u16) -> World {
    World {
        rank,
        size,
        local_rank: rank,
        chief_addr: "127.0.0.1".to_owned(),
        port,
    }
}

const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn four_ranks_gather_every_part_in_rank_order_round_after_round() {
    let port = free_port();
    let results: Vec<Vec<Vec<Vec<u8>>>> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                scope.spawn(move || {
                    let mut star = Star::connect(&world(rank, 4, port), "build-a", PATIENCE)?;
                    (0..3u8)
                        .map(|round| {
                            star.all_gather(vec![rank as u8; usize::from(round) * 1000 + rank])
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().expect("rank thread").expect("rank"))
            .collect()
    });
    for round in 0..3usize {
        let expected: Vec<Vec<u8>> = (0..4).map(|r| vec![r as u8; round * 1000 + r]).collect();
        for (rank, rounds) in results.iter().enumerate() {
            assert_eq!(rounds[round], expected, "rank {rank}, round {round}");
        }
    }
}

#[test]
fn a_rank_that_dies_makes_the_others_fail_instead_of_waiting() {
    let port = free_port();
    std::thread::scope(|scope| {
        let chief = scope.spawn(move || {
            let mut star = Star::connect(&world(0, 2, port), "build-a", PATIENCE)?;
            star.all_gather(b"first".to_vec())?;
            star.all_gather(b"second".to_vec())
        });
        let worker = scope.spawn(move || {
            let mut star = Star::connect(&world(1, 2, port), "build-a", PATIENCE)?;
            star.all_gather(b"first".to_vec())
            // Dropped here: the worker's process ended.
        });
        worker.join().expect("worker").expect("first round");
        let err = chief
            .join()
            .expect("chief")
            .expect_err("the worker is gone");
        assert!(
            err.to_string().contains("receiving frame 2 from rank 1"),
            "{err}"
        );
    });
}

#[test]
fn a_rank_started_with_another_world_size_is_refused() {
    let port = free_port();
    std::thread::scope(|scope| {
        let chief = scope.spawn(move || Star::connect(&world(0, 2, port), "build-a", PATIENCE));
        let stranger = scope.spawn(move || Star::connect(&world(1, 3, port), "build-a", PATIENCE));
        let err = chief.join().expect("chief").expect_err("refused");
        assert!(err.to_string().contains("WORLD_SIZE 2"), "{err}");
        assert!(stranger.join().expect("stranger").is_err());
    });
}

#[test]
fn a_chief_nobody_joins_gives_up_after_its_patience() {
    let err =
        Star::connect(&world(0, 3, free_port()), "build-a", Duration::ZERO).expect_err("alone");
    assert!(
        err.to_string().contains("ranks 1, 2 did not connect"),
        "{err}"
    );
}

#[test]
fn a_connection_that_is_not_a_rank_is_dropped_and_the_ranks_still_meet() {
    use std::io::Write;
    let port = free_port();
    std::thread::scope(|scope| {
        let chief = scope.spawn(move || {
            let mut star = Star::connect(&world(0, 2, port), "build-a", PATIENCE)?;
            star.all_gather(b"chief".to_vec())
        });
        // A client that speaks something else first (a health check, a port scan).
        let mut stranger = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) => std::thread::yield_now(),
            }
        };
        stranger
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123456789")
            .expect("write");
        let worker = scope.spawn(move || {
            let mut star = Star::connect(&world(1, 2, port), "build-a", PATIENCE)?;
            star.all_gather(b"worker".to_vec())
        });
        let parts = worker.join().expect("worker").expect("met");
        assert_eq!(parts, vec![b"chief".to_vec(), b"worker".to_vec()]);
        assert!(chief.join().expect("chief").is_ok());
    });
}

#[test]
fn a_rank_of_another_build_is_refused_naming_both() {
    let port = free_port();
    std::thread::scope(|scope| {
        let chief = scope.spawn(move || Star::connect(&world(0, 2, port), "build-a", PATIENCE));
        let other = scope.spawn(move || Star::connect(&world(1, 2, port), "build-b", PATIENCE));
        let err = chief.join().expect("chief").expect_err("refused");
        assert!(
            err.to_string().contains("build-b") && err.to_string().contains("build-a"),
            "{err}"
        );
        assert!(other.join().expect("other").is_err());
    });
}
