//! The server workloads of `bench record`: memcached under memcaslap, and a
//! database server (MariaDB) under sysbench's OLTP read/write load — each run
//! launched under a recorder or attached to (`-attach`), the same way.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Which server a workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Memcached,
    Mariadb,
}

/// sysbench's clients (the "4 clients"), tables and rows per table.
const SYSBENCH_THREADS: u32 = 4;
const SYSBENCH_TABLES: u32 = 4;
const SYSBENCH_ROWS: u32 = 10_000;

impl Server {
    /// The server of a workload name (`memcached`, `mariadb-attach`, …).
    pub fn of(workload: &str) -> Option<Server> {
        let server = workload
            .strip_suffix("-attach")
            .or_else(|| workload.strip_suffix("-windows"))
            .or_else(|| workload.strip_suffix("-alternating"))
            .unwrap_or(workload);
        match server {
            "memcached" => Some(Server::Memcached),
            "mariadb" => Some(Server::Mariadb),
            _ => None,
        }
    }

    /// The workload's name in launch mode.
    pub fn name(self) -> &'static str {
        match self {
            Server::Memcached => "memcached",
            Server::Mariadb => "mariadb",
        }
    }

    pub fn binary(self) -> &'static Path {
        match self {
            Server::Memcached => Path::new("/usr/bin/memcached"),
            Server::Mariadb => Path::new("/usr/sbin/mariadbd"),
        }
    }

    /// What the load is, for the report's heading.
    pub fn describe(self, seconds: u64) -> String {
        match self {
            Server::Memcached => {
                format!("memcached -t 2 under memcaslap -T 2 -c 32 for {seconds} s")
            }
            Server::Mariadb => format!(
                "mariadbd under sysbench oltp_read_write, {SYSBENCH_THREADS} clients, {SYSBENCH_TABLES} tables × {SYSBENCH_ROWS} rows, for {seconds} s (transactions/s)"
            ),
        }
    }
}

/// One server instance's address and command line.
pub struct Instance {
    pub server: Server,
    endpoint: Endpoint,
    pub args: Vec<String>,
}

enum Endpoint {
    Tcp(u16),
    Unix(PathBuf),
}

impl Instance {
    /// A memcached on a free loopback port.
    pub fn memcached() -> Result<Instance> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok(Instance {
            server: Server::Memcached,
            endpoint: Endpoint::Tcp(port),
            args: format!("-t 2 -U 0 -l 127.0.0.1 -p {port} -u root")
                .split(' ')
                .map(String::from)
                .collect(),
        })
    }

    /// A MariaDB server on the prepared data directory `data`, reached through
    /// a socket beside it (no TCP), its durability as a benchmark would set it
    /// (the log flushed once a second) so that the disk does not set the pace.
    pub fn mariadb(data: &Path) -> Instance {
        let dir = data.parent().unwrap_or(data);
        let socket = dir.join("mariadb.sock");
        Instance {
            server: Server::Mariadb,
            args: vec![
                "--no-defaults".into(),
                format!("--datadir={}", data.display()),
                format!("--socket={}", socket.display()),
                format!("--pid-file={}", dir.join("mariadb.pid").display()),
                format!("--log-error={}", dir.join("mariadb.err").display()),
                "--skip-networking".into(),
                "--user=root".into(),
                "--innodb-buffer-pool-size=256M".into(),
                "--innodb-flush-log-at-trx-commit=2".into(),
            ],
            endpoint: Endpoint::Unix(socket),
        }
    }

    /// Starts this instance's server natively (no recorder), its output discarded.
    pub fn start_native(&self) -> Result<Child> {
        let binary = self.server.binary();
        Command::new(binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("run {}", binary.display()))
    }

    /// Waits until the server accepts connections.
    pub fn wait_ready(&self, limit: Duration) -> Result<()> {
        let started = Instant::now();
        while !self.connects() {
            if started.elapsed() > limit {
                bail!(
                    "{} did not accept connections within {} s",
                    self.server.name(),
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn connects(&self) -> bool {
        match &self.endpoint {
            Endpoint::Tcp(port) => TcpStream::connect(("127.0.0.1", *port)).is_ok(),
            Endpoint::Unix(socket) => UnixStream::connect(socket).is_ok(),
        }
    }

    /// One short exchange on a new connection (the server takes locks for it),
    /// so that an attached recorder has events to see.
    pub fn poke(&self) {
        let exchange = |s: &mut dyn ReadWrite, request: &[u8]| {
            let _ = s.write_all(request);
            let mut buf = [0u8; 128];
            let _ = s.read(&mut buf);
        };
        match &self.endpoint {
            Endpoint::Tcp(port) => {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", *port)) {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    exchange(&mut s, b"version\r\n");
                }
            }
            // The server greets a new connection first (its handshake).
            Endpoint::Unix(socket) => {
                if let Ok(mut s) = UnixStream::connect(socket) {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    exchange(&mut s, b"");
                }
            }
        }
    }

    /// The pid of this instance's server process (started by the bench, possibly
    /// under a recorder that is its parent): the process of the server's binary
    /// whose command line names this instance's port or socket.
    pub fn find_pid(&self) -> Option<u32> {
        let binary = self.server.binary().file_name()?.as_encoded_bytes();
        let mark = match &self.endpoint {
            Endpoint::Tcp(port) => port.to_string(),
            Endpoint::Unix(socket) => format!("--socket={}", socket.display()),
        };
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok())
            .find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                let is_server = args.first().is_some_and(|a| a.ends_with(binary));
                let is_this = args.contains(&mark.as_bytes());
                (is_server && is_this).then_some(pid)
            })
    }

    /// Runs the load for `seconds`: (operations or transactions a second,
    /// average latency µs, 99th-percentile latency µs).
    pub fn load(&self, seconds: u64) -> Result<(f64, Option<f64>, Option<f64>)> {
        match &self.endpoint {
            Endpoint::Tcp(port) => memcaslap(*port, seconds),
            Endpoint::Unix(socket) => sysbench(socket, "run", seconds),
        }
    }
}

impl Instance {
    /// Starts the load in the background for `seconds` (memcached only: its
    /// `stats` count what it served, [`Instance::rate_over`]).
    pub fn start_load(&self, seconds: u64) -> Result<Child> {
        let Endpoint::Tcp(port) = &self.endpoint else {
            bail!("windows are measured on memcached only");
        };
        let t = format!("{seconds}s");
        Command::new("memcaslap")
            .args(["-s", &format!("127.0.0.1:{port}"), "-T", "2", "-c", "32"])
            .args(["-t", &t, "-S", &t])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("run memcaslap")
    }

    /// Operations a second the server served over the next `window` (its own
    /// `cmd_get` and `cmd_set` counters, read before and after).
    pub fn rate_over(&self, window: Duration) -> Result<f64> {
        let (before, start) = (self.served()?, Instant::now());
        std::thread::sleep(window);
        let (after, took) = (self.served()?, start.elapsed());
        Ok(after.saturating_sub(before) as f64 / took.as_secs_f64())
    }

    /// Gets and sets served so far (memcached's `stats`).
    fn served(&self) -> Result<u64> {
        let Endpoint::Tcp(port) = &self.endpoint else {
            bail!("windows are measured on memcached only");
        };
        let mut s = TcpStream::connect(("127.0.0.1", *port)).context("connect for stats")?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(b"stats\r\n")?;
        let mut text = Vec::new();
        let mut buf = [0u8; 8192];
        while !text.ends_with(b"END\r\n") {
            let n = s.read(&mut buf).context("read memcached stats")?;
            if n == 0 {
                bail!("memcached closed the stats connection");
            }
            text.extend_from_slice(&buf[..n]);
        }
        parse_served(&String::from_utf8_lossy(&text))
            .context("memcached stats without cmd_get and cmd_set")
    }
}

/// `cmd_get` + `cmd_set` of memcached's `stats` reply.
pub fn parse_served(text: &str) -> Option<u64> {
    let counter = |name: &str| {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("STAT") && w.next() == Some(name))
                .then(|| w.next()?.parse::<u64>().ok())
                .flatten()
        })
    };
    Some(counter("cmd_get")? + counter("cmd_set")?)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn memcaslap(port: u16, seconds: u64) -> Result<(f64, Option<f64>, Option<f64>)> {
    let t = format!("{seconds}s");
    let out = Command::new("memcaslap")
        .args([
            "-s",
            &format!("127.0.0.1:{port}"),
            "-T",
            "2",
            "-c",
            "32",
            "-t",
            &t,
            "-S",
            &t,
        ])
        .stdin(Stdio::null())
        .output()
        .context("run memcaslap")?;
    super::parse_memcaslap(&String::from_utf8_lossy(&out.stdout)).with_context(|| {
        format!(
            "memcaslap printed no throughput ({}): {}",
            out.status,
            super::first_line(&out.stderr)
        )
    })
}

/// `sysbench oltp_read_write` `command` (`prepare` or `run`) against the server
/// at `socket`.
fn sysbench(socket: &Path, command: &str, seconds: u64) -> Result<(f64, Option<f64>, Option<f64>)> {
    let out = Command::new("sysbench")
        .arg("oltp_read_write")
        .args(["--db-driver=mysql", "--mysql-user=root", "--percentile=99"])
        .arg(format!("--mysql-socket={}", socket.display()))
        .arg(format!("--tables={SYSBENCH_TABLES}"))
        .arg(format!("--table-size={SYSBENCH_ROWS}"))
        .arg(format!("--threads={SYSBENCH_THREADS}"))
        .arg(format!("--time={seconds}"))
        .arg(command)
        .stdin(Stdio::null())
        .output()
        .context("run sysbench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "sysbench {command} failed ({}): {}",
            out.status,
            super::first_line(&out.stderr)
        );
    }
    if command != "run" {
        return Ok((0.0, None, None));
    }
    parse_sysbench(&text).with_context(|| {
        format!(
            "sysbench printed no transaction rate: {}",
            super::first_line(&out.stderr)
        )
    })
}

/// sysbench's summary: (transactions/s, average µs, 99th percentile µs). It
/// prints `transactions: N (R per sec.)` and latencies in milliseconds.
pub fn parse_sysbench(text: &str) -> Option<(f64, Option<f64>, Option<f64>)> {
    let rate = text
        .lines()
        .find(|l| l.trim_start().starts_with("transactions:"))?
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let ms = |label: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))?
            .split(':')
            .nth(1)?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|ms| ms * 1e3)
    };
    Some((rate, ms("avg:"), ms("99th percentile:")))
}

/// Makes a MariaDB data directory under `dir` with sysbench's tables in it
/// (`mariadb-install-db`, a server started for it, `sysbench … prepare`, the
/// server shut down): every run of the `mariadb` workloads starts a server on
/// it. Returns the data directory.
pub fn prepare_mariadb(dir: &Path) -> Result<PathBuf> {
    for tool in ["mariadb-install-db", "sysbench", "mariadb"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is not installed (mariadb-server and sysbench: `cargo xtask bench` installs them where it can)");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let data = dir.join("data");
    crate::run(
        Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .arg("--auth-root-authentication-method=normal")
            .arg(format!("--datadir={}", data.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let instance = Instance::mariadb(&data);
    let mut server = Command::new(Server::Mariadb.binary())
        .args(&instance.args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start mariadbd")?;
    let prepared = (|| -> Result<()> {
        instance.wait_ready(Duration::from_secs(60))?;
        let Endpoint::Unix(socket) = &instance.endpoint else {
            unreachable!("MariaDB is reached by its socket");
        };
        crate::run(
            Command::new("mariadb")
                .args(["--no-defaults", "-uroot", "-e", "create database sbtest"])
                .arg(format!("--socket={}", socket.display())),
        )?;
        sysbench(socket, "prepare", 0).map(|_| ())
    })();
    super::signal(server.id(), libc::SIGTERM);
    super::wait_bounded(&mut server, Duration::from_secs(60), "mariadbd")?;
    prepared.context("prepare MariaDB's tables")?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysbench_rate_and_latencies() {
        let text = "SQL statistics:\n    transactions:                        8175   (1634.12 per sec.)\n    queries:                             163500 (32682.33 per sec.)\nLatency (ms):\n         min:                                    1.21\n         avg:                                    2.44\n         max:                                   31.07\n         99th percentile:                        5.47\n";
        let (rate, avg, p99) = parse_sysbench(text).unwrap();
        assert_eq!(rate, 1634.12);
        assert!((avg.unwrap() - 2440.0).abs() < 1e-6);
        assert!((p99.unwrap() - 5470.0).abs() < 1e-6);
        assert!(parse_sysbench("FATAL: no database").is_none());
    }

    #[test]
    fn served_is_gets_plus_sets() {
        let text =
            "STAT pid 7\r\nSTAT cmd_get 1200\r\nSTAT cmd_set 34\r\nSTAT cmd_flush 0\r\nEND\r\n";
        assert_eq!(parse_served(text), Some(1234));
        assert_eq!(parse_served("STAT cmd_get 5\r\nEND\r\n"), None);
    }

    #[test]
    fn workloads_name_their_server() {
        assert_eq!(Server::of("mariadb-attach"), Some(Server::Mariadb));
        assert_eq!(Server::of("memcached"), Some(Server::Memcached));
        assert_eq!(Server::of("lock"), None);
    }
}
