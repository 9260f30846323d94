//! nginx as a target for the CLI's tests: one process (`master_process off`, so
//! no user switch: the tests run as root or not), every path in a temporary
//! prefix.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The nginx binary, or `None` (with a skip note) where it is not installed; CI
/// installs it, so there its absence fails the test.
pub fn nginx_or_skip() -> Option<PathBuf> {
    let bin = nginx_binary();
    if bin.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("nginx is required in CI (Debian package `nginx`; .ci/run installs it)");
        }
        eprintln!("skipped: nginx is not installed (apt-get install nginx to run this test)");
    }
    bin
}

pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn start_nginx(bin: &Path, dir: &Path, http: &str, location: &str) -> Nginx {
    let port = free_port();
    std::fs::create_dir_all(dir.join("html")).unwrap();
    std::fs::write(dir.join("html/index.html"), "ok\n").unwrap();
    let d = dir.display();
    let conf = format!(
        "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log crit;
events {{ worker_connections 4096; }}
http {{
  {http}
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  server {{
    listen 127.0.0.1:{port};
    root {d}/html;
    location / {{
      {location}
    }}
  }}
}}
"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::File::create(&conf_path)
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .unwrap();
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.join("startup.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut nginx = Nginx { child, addr };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if TcpStream::connect(addr).is_ok() {
            return nginx;
        }
        if let Ok(Some(status)) = nginx.child.try_wait() {
            let log = std::fs::read_to_string(dir.join("startup.log")).unwrap_or_default();
            panic!("nginx exited ({status}) before listening: {log}");
        }
        assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
