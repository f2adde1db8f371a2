//! Waits under a safety net, a tiny HTTP/1.1 client, and free loopback addresses.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The safety net of every wait: a broken test fails after this instead of hanging. Never a timing assertion.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A safety net so that a broken test fails instead of hanging; never a timing assertion.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, fut).await.unwrap_or_else(|_| panic!("{what} never happened"))
}

/// Calls `probe` every `every` until it answers `Some`, and returns that answer; fails the test if
/// [`DEADLINE`] passes first.
pub async fn until<T>(what: &str, every: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    within(what, async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(every).await;
        }
    })
    .await
}

/// A free port on 127.0.0.1 (bound, then released for the process that will listen on it).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The port of [`free_addr`].
pub fn free_port() -> u16 {
    free_addr().port()
}

/// Binds a listener on a free loopback port: (listener, "127.0.0.1:PORT").
pub async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

fn invalid(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.into())
}

/// The body of a `Transfer-Encoding: chunked` response, decoded.
fn dechunk(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n").ok_or_else(|| invalid("no chunk size line"))?;
        let size = std::str::from_utf8(&raw[..eol]).map_err(|_| invalid("a chunk size that is not text"))?;
        let size = size.split(';').next().unwrap_or("").trim();
        let len = usize::from_str_radix(size, 16).map_err(|_| invalid(format!("chunk size {size:?}")))?;
        raw = &raw[eol + 2..];
        if len == 0 {
            return Ok(out);
        }
        let chunk = raw.get(..len).ok_or_else(|| invalid("a chunk cut short"))?;
        out.extend_from_slice(chunk);
        raw = raw.get(len + 2..).ok_or_else(|| invalid("a chunk without its CRLF"))?;
    }
}

/// `GET path` over HTTP/1.1 with `Connection: close` and the extra `headers`: (status, body), the body
/// de-chunked when it came chunked.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let end =
        raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| invalid("no end of the headers"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status =
        head.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| invalid("no status code"))?;
    let body = &raw[end + 4..];
    let body = if head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked")) {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    let body = String::from_utf8(body).map_err(|_| invalid("a body that is not UTF-8"))?;
    Ok((status, body))
}

/// `s` with everything but RFC 3986's unreserved characters percent-encoded (a query-string value).
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
