//! The settings of a web configuration file that the TLS and authentication layers take: the
//! types [`super::web_config`] reads the file into, kept apart so that those layers depend on them
//! and not on the reader (which builds them).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest certificate, key or CA file read.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// PEM text: a file (`cert_file`, `key_file`, `client_ca_file`) or inline (`cert`, `key`, `client_ca`).
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file, its path made absolute against the web config file's directory.
    File(PathBuf),
    /// The PEM text itself.
    Inline(String),
}

impl std::fmt::Debug for PemSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemSource::File(p) => f.debug_tuple("File").field(p).finish(),
            // May be a private key: never printed.
            PemSource::Inline(text) => write!(f, "Inline(<{} bytes>)", text.len()),
        }
    }
}

impl PemSource {
    /// The bytes, read from the file if it is one (at most [`MAX_PEM_BYTES`]).
    pub fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            PemSource::Inline(text) => Ok(text.clone().into_bytes()),
            PemSource::File(path) => read_bounded(path, MAX_PEM_BYTES),
        }
    }
}

/// `client_auth_type`: Go's `tls.ClientAuthType` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for (the default).
    NoClientCert,
    /// A certificate is asked for, not required, and not verified.
    RequestClientCert,
    /// A certificate is required but not verified (`RequireClientCert` is an old name for it).
    RequireAnyClientCert,
    /// A certificate is not required; one that is sent must be signed by the client CA (the
    /// system's CAs when there is no `client_ca_file`, as in Go).
    VerifyClientCertIfGiven,
    /// A certificate signed by the client CA (the system's CAs when there is no `client_ca_file`)
    /// is required: the only safe choice for mTLS.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    pub(super) fn parse(name: &str) -> Option<ClientAuth> {
        Some(match name {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    /// Whether client certificates are verified (against the client CA, or the system's CAs).
    pub fn verifies(self) -> bool {
        matches!(self, ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert)
    }
}

/// `min_version`, `max_version`: the TLS versions rustls has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLS12`.
    Tls12,
    /// `TLS13`.
    Tls13,
}

/// `curve_preferences`: the key exchange groups rustls (with ring) has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// `X25519`.
    X25519,
    /// `CurveP256` (secp256r1).
    P256,
    /// `CurveP384` (secp384r1).
    P384,
}

/// `tls_server_config`, when it turns TLS on.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The server's certificate chain (`cert_file` or `cert`).
    pub cert: PemSource,
    /// Its private key (`key_file` or `key`).
    pub key: PemSource,
    /// The CA that signs client certificates (`client_ca_file` or `client_ca`); the system's CAs
    /// verify them when `None` (Go's rule). A certificate listed here is trusted as it is.
    pub client_ca: Option<PemSource>,
    /// `client_auth_type`.
    pub client_auth: ClientAuth,
    /// `client_allowed_sans`: a client certificate must name one of these (DNS names or IP addresses).
    pub client_allowed_sans: Vec<String>,
    /// `min_version` (default TLS 1.2).
    pub min_version: TlsVersion,
    /// `max_version` (default TLS 1.3).
    pub max_version: TlsVersion,
    /// `cipher_suites` (Go's names): the TLS 1.2 suites allowed, in preference order (all of
    /// rustls's when empty). TLS 1.3's suites may be listed and are always all allowed, as in Go.
    pub cipher_suites: Vec<rustls::CipherSuite>,
    /// `prefer_server_cipher_suites` (default true): the server's order wins.
    pub prefer_server_cipher_suites: bool,
    /// `curve_preferences`, in preference order (rustls's default when empty).
    pub curve_preferences: Vec<Curve>,
}

/// `rate_limit`: a token bucket over every request (429 when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// One token comes back every `interval`.
    pub interval: Duration,
    /// The bucket's size. 0 (also when `burst` is missing) refuses every request, as the toolkit
    /// (`golang.org/x/time/rate`) does.
    pub burst: u32,
}

/// Reads at most `limit` bytes of `path`, or says why not.
pub(super) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(format!("{} is larger than {limit} bytes", path.display()));
    }
    Ok(bytes)
}
