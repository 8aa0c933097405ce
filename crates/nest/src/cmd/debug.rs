//! `nest debug`: small programs for trying out and testing the process runtime, run from nest's own image.
//!
//! - `http-echo --listen ADDR:PORT`: answers every HTTP request with a line naming the pod (`$HOSTNAME`), the
//!   address it was reached on and the path, and logs each request to stdout. `/healthz` fails once
//!   `--healthy-for-seconds` have passed, for liveness probes.
//! - `exit --code N`: prints a line and exits with code N after `--after-ms`, for restart back-off.
//! - `cat FILE…`: prints files (what a volume holds) and environment variables (`--env NAME`), then sleeps.
//! - `connect ADDR:PORT…`: tries to connect to each address (and to listen on each `--bind` one), printing a line
//!   for each (`ADDR connected` or `ADDR: <error>`), then sleeps: what a pod can reach.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Subcommand, Debug)]
pub enum Debug {
    /// An HTTP server that says which pod answered.
    HttpEcho {
        #[arg(long, value_name = "ADDR:PORT")]
        listen: SocketAddr,
        /// After this many seconds /healthz answers 500.
        #[arg(long, value_name = "SECONDS")]
        healthy_for_seconds: Option<u64>,
    },
    /// Prints a line, then exits with a code.
    Exit {
        #[arg(long, default_value_t = 1)]
        code: i32,
        #[arg(long, value_name = "MS", default_value_t = 0)]
        after_ms: u64,
    },
    /// Takes MEBIBYTES of memory (each page written, so the kernel really gives it), a mebibyte at a time, printing
    /// how far it got; then sleeps until stopped.
    Allocate {
        #[arg(long, value_name = "MEBIBYTES")]
        mebibytes: usize,
    },
    /// Prints files and environment variables, then sleeps until stopped.
    Cat {
        files: Vec<PathBuf>,
        #[arg(long = "env", value_name = "NAME")]
        env: Vec<String>,
    },
    /// Tries to connect to each address, and to listen on each `--bind` address; prints what happened, then sleeps.
    Connect {
        #[arg(value_name = "ADDR:PORT")]
        addresses: Vec<SocketAddr>,
        #[arg(long = "bind", value_name = "ADDR:PORT")]
        binds: Vec<SocketAddr>,
    },
}

pub async fn run(which: Debug) -> anyhow::Result<()> {
    match which {
        Debug::HttpEcho { listen, healthy_for_seconds } => http_echo(listen, healthy_for_seconds).await,
        Debug::Exit { code, after_ms } => {
            println!("exiting with code {code} after {after_ms} ms");
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            std::process::exit(code);
        }
        Debug::Allocate { mebibytes } => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            for taken in 1..=mebibytes {
                held.push(vec![1u8; 1 << 20]);
                if taken % 16 == 0 || taken == mebibytes {
                    println!("holding {taken} MiB");
                }
            }
            super::shutdown_signal().await;
            drop(held);
            Ok(())
        }
        Debug::Cat { files, env } => {
            for file in &files {
                let text = std::fs::read_to_string(file).unwrap_or_else(|e| format!("<{e}>"));
                println!("{}: {text}", file.display());
            }
            for name in &env {
                println!("${name}={}", std::env::var(name).unwrap_or_default());
            }
            super::shutdown_signal().await;
            Ok(())
        }
        Debug::Connect { addresses, binds } => {
            for address in &addresses {
                let tried = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(address)).await;
                match tried {
                    Ok(Ok(_)) => println!("{address} connected"),
                    Ok(Err(error)) => println!("{address}: {error}"),
                    Err(_) => println!("{address}: timed out"),
                }
            }
            let mut held = Vec::new();
            for address in &binds {
                match std::net::TcpListener::bind(address) {
                    Ok(listener) => {
                        println!("{address} bound");
                        held.push(listener);
                    }
                    Err(error) => println!("{address}: {error}"),
                }
            }
            super::shutdown_signal().await;
            Ok(())
        }
    }
}

async fn http_echo(listen: SocketAddr, healthy_for: Option<u64>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let pod = std::env::var("HOSTNAME").unwrap_or_default();
    println!("http-echo {pod} listening on {}", listener.local_addr()?);
    let started = Instant::now();
    let serve = async {
        loop {
            let Ok((mut stream, peer)) = listener.accept().await else { continue };
            let pod = pod.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let unhealthy = path == "/healthz" && healthy_for.is_some_and(|s| started.elapsed().as_secs() >= s);
                let (status, body) = if unhealthy {
                    ("500 Internal Server Error", "unhealthy\n".to_string())
                } else {
                    let local = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
                    ("200 OK", format!("{pod} {local} {path}\n"))
                };
                println!("{peer} GET {path} {}", &status[..3]);
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    };
    tokio::select! {
        () = serve => Ok(()),
        () = super::shutdown_signal() => {
            println!("http-echo {pod} stopping");
            Ok(())
        }
    }
}
