//! The least a TCP forwarder can do, as a floor for kquota-proxy's CPU per MiB: every connection
//! to LISTEN is joined to a new connection to UPSTREAM, and two threads copy bytes, one each way,
//! through a 64 KiB buffer (no parsing, no frames, no runtime). Kafka clients cannot use it (it
//! does not rewrite the broker addresses in Metadata); bench/cpu.py's raw requests can.
//!
//!     rustc -O -o forward kquota-proxy/bench/forward.rs
//!     forward LISTEN UPSTREAM          e.g. forward 127.0.0.1:0 127.0.0.1:9092
//!
//! Prints "forwarding LISTEN" once listening (the bound address, for port 0). Std only.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: forward LISTEN UPSTREAM");
        std::process::exit(2);
    }
    let listener = TcpListener::bind(&args[1]).expect("bind LISTEN");
    println!("forwarding {}", listener.local_addr().expect("local address"));
    let upstream = args[2].clone();
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(&upstream) else { continue };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (c2, s2) = match (client.try_clone(), server.try_clone()) {
            (Ok(c), Ok(s)) => (c, s),
            _ => continue,
        };
        thread::spawn(move || pump(client, server));
        thread::spawn(move || pump(s2, c2));
    }
}
