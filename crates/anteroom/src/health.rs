//! `anteroom health --url <url>`: a health probe for places that run a command to learn whether
//! the node is up, such as a container's `HEALTHCHECK`. It asks the URL once and exits 0 when the
//! answer is 2xx, 1 otherwise.
//!
//! Plain `http://` over a blocking socket: the probe runs beside the node on loopback, so it
//! needs neither TLS nor an async runtime, and the container image needs no curl.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::BadConfig;

/// How long connecting, sending and reading the status line may each take; a node that takes
/// longer is not healthy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most the probe reads looking for the end of the status line.
const MAX_STATUS_LINE_BYTES: usize = 1024;

/// Asks `url` once and says whether it answered 2xx.
#[allow(clippy::print_stdout)]
pub(crate) fn probe(url: &str) -> anyhow::Result<ExitCode> {
    let target =
        ProbeTarget::parse(url).map_err(|problem| BadConfig(format!("--url: {problem}")))?;
    let status_line = target.status_line()?;
    println!("{url}: {status_line}");
    let status = status_code(&status_line)
        .with_context(|| format!("not an HTTP status line: {status_line:?}"))?;
    Ok(if (200..300).contains(&status) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where an `http://host[:port][/path]` URL points.
#[derive(Debug, PartialEq)]
struct ProbeTarget {
    /// `host:port` as written (the port defaulted to 80), for connecting and for `Host`.
    authority: String,
    /// The path and query, `/` when the URL has none.
    path: String,
}

impl ProbeTarget {
    fn parse(url: &str) -> Result<ProbeTarget, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!("{url:?} is not an http:// URL"));
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("{url:?} names no host"));
        }
        // `[::1]` has colons but no port; a port is what follows the last colon, if it is a number.
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| port.parse::<u16>().is_ok());
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(ProbeTarget {
            authority,
            path: path.to_owned(),
        })
    }

    /// Sends one GET and returns the answer's status line.
    fn status_line(&self) -> anyhow::Result<String> {
        let mut stream = self.connect()?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: anteroom-health\r\nConnection: close\r\n\r\n",
            self.path, self.authority
        );
        stream
            .write_all(request.as_bytes())
            .with_context(|| format!("sending to {}", self.authority))?;
        let mut head = Vec::new();
        let mut chunk = [0_u8; 256];
        while !head.windows(2).any(|pair| pair == b"\r\n") && head.len() < MAX_STATUS_LINE_BYTES {
            let read = stream
                .read(&mut chunk)
                .with_context(|| format!("reading from {}", self.authority))?;
            if read == 0 {
                break;
            }
            head.extend_from_slice(&chunk[..read]);
        }
        let head = String::from_utf8_lossy(&head);
        Ok(head.lines().next().unwrap_or_default().to_owned())
    }

    fn connect(&self) -> anyhow::Result<TcpStream> {
        let addresses: Vec<SocketAddr> = self
            .authority
            .to_socket_addrs()
            .with_context(|| format!("resolving {}", self.authority))?
            .collect();
        let mut last_error = None;
        for address in addresses {
            match TcpStream::connect_timeout(&address, PROBE_TIMEOUT) {
                Ok(stream) => return Ok(stream),
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) => Err(error).with_context(|| format!("connecting to {}", self.authority)),
            None => bail!("{} resolves to no address", self.authority),
        }
    }
}

/// The code of `HTTP/1.1 200 OK`.
fn status_code(status_line: &str) -> Option<u16> {
    let mut words = status_line.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, expected: Result<(&str, &str), &str>) {
        match (ProbeTarget::parse(url), expected) {
            (Ok(target), Ok((authority, path))) => {
                assert_eq!(target.authority, authority, "{url}");
                assert_eq!(target.path, path, "{url}");
            }
            (Err(problem), Err(words)) => assert!(problem.contains(words), "{url}: {problem}"),
            (parsed, expected) => panic!("{url}: parsed {parsed:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn parses_what_a_health_check_names() {
        check(
            "http://127.0.0.1:8080/_anteroom/readyz",
            Ok(("127.0.0.1:8080", "/_anteroom/readyz")),
        );
        check("http://localhost", Ok(("localhost:80", "/")));
        check("http://[::1]/healthz?x=1", Ok(("[::1]:80", "/healthz?x=1")));
        check("http://[::1]:9090/", Ok(("[::1]:9090", "/")));
        check("https://127.0.0.1/", Err("not an http:// URL"));
        check("http:///healthz", Err("names no host"));
    }

    #[test]
    fn reads_the_code_of_a_status_line() {
        assert_eq!(status_code("HTTP/1.1 200 OK"), Some(200));
        assert_eq!(status_code("HTTP/1.1 503 Service Unavailable"), Some(503));
        assert_eq!(status_code("SSH-2.0-OpenSSH"), None);
        assert_eq!(status_code(""), None);
    }
}
