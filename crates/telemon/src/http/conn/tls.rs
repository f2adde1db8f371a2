//! `tls_server_config` as a rustls server (ring provider): the certificate re-read when its files
//! change, client certificates per `client_auth_type` as Go's `crypto/tls` checks them (the system's
//! CA certificates when no `client_ca_file` is given; a certificate listed in `client_ca_file` taken
//! as it is, even a self-signed CA one), and why a client certificate was refused, for the log.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, RootCertStore, ServerConfig,
    SignatureScheme,
};

use super::settings::{ClientAuth, Curve, PemSource, TlsSettings, TlsVersion};

/// How often, at most, the certificate and key files are looked at (their size, mtime and inode)
/// for a change. The look happens in a TLS handshake, on the connection's own task.
pub const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A failure and the `tls_server_config` key it is about.
pub(super) type KeyError = (&'static str, String);

/// The rustls server for `tls`, or the key at fault and why.
pub(super) fn server_config(tls: &TlsSettings) -> Result<Arc<ServerConfig>, KeyError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !tls.cipher_suites.is_empty() {
        // TLS 1.2's suites as listed (in that order), then all of TLS 1.3's (Go does not let them be chosen).
        let all = std::mem::take(&mut provider.cipher_suites);
        let mut chosen: Vec<_> = tls
            .cipher_suites
            .iter()
            .filter_map(|name| all.iter().find(|s| s.suite() == *name && s.tls13().is_none()).copied())
            .collect();
        chosen.extend(all.iter().filter(|s| s.tls13().is_some()).copied());
        provider.cipher_suites = chosen;
    }
    if !tls.curve_preferences.is_empty() {
        use rustls::crypto::ring::kx_group;
        provider.kx_groups = tls
            .curve_preferences
            .iter()
            .map(|c| match c {
                Curve::X25519 => kx_group::X25519,
                Curve::P256 => kx_group::SECP256R1,
                Curve::P384 => kx_group::SECP384R1,
            })
            .collect();
    }
    let provider = Arc::new(provider);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(TlsVersion::Tls12, &rustls::version::TLS12), (TlsVersion::Tls13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (tls.min_version..=tls.max_version).contains(v))
            .map(|(_, p)| p)
            .collect();
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions).map_err(
            |e| ("cipher_suites", format!("no cipher suite is left for the TLS versions allowed: {e}")),
        )?;
    let verifier = client_verifier(tls, &provider)?;
    let resolver = ReloadingCert::new(tls.cert.clone(), tls.key.clone(), provider.clone())?;
    let mut config = builder.with_client_cert_verifier(verifier).with_cert_resolver(Arc::new(resolver));
    config.ignore_client_order = tls.prefer_server_cipher_suites;
    // HTTP/1.1 only (see WebConfig::http2).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn cert_key(source: &PemSource) -> &'static str {
    if matches!(source, PemSource::File(_)) {
        "cert_file"
    } else {
        "cert"
    }
}

fn key_key(source: &PemSource) -> &'static str {
    if matches!(source, PemSource::File(_)) {
        "key_file"
    } else {
        "key"
    }
}

/// Reads the certificate chain and key and checks that they belong together.
pub(super) fn load_pair(
    cert: &PemSource,
    key: &PemSource,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, KeyError> {
    let cert_bytes = cert.read().map_err(|e| (cert_key(cert), e))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| (cert_key(cert), format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err((cert_key(cert), "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
    }
    let key_bytes = key.read().map_err(|e| (key_key(key), e))?;
    let private = PrivateKeyDer::from_pem_slice(&key_bytes)
        .map_err(|e| (key_key(key), format!("no PEM private key in it: {e}")))?;
    CertifiedKey::from_der(chain, private, provider)
        .map_err(|e| (key_key(key), format!("cannot use this key with the certificate: {e}")))
}

fn client_verifier(
    tls: &TlsSettings,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, KeyError> {
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ClientCertVerifier> = match tls.client_auth {
        ClientAuth::NoClientCert => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::RequestClientCert => Arc::new(Unchecked { mandatory: false, accept: true, algorithms }),
        ClientAuth::RequireAnyClientCert => Arc::new(Unchecked { mandatory: true, accept: true, algorithms }),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let mandatory = tls.client_auth == ClientAuth::RequireAndVerifyClientCert;
            let (roots, pinned) = match &tls.client_ca {
                Some(ca) => {
                    let certs = client_ca(ca)?;
                    let mut store = RootCertStore::empty();
                    for cert in &certs {
                        store
                            .add(cert.clone())
                            .map_err(|e| (ca_key(ca), format!("not a usable CA certificate: {e}")))?;
                    }
                    (Arc::new(store), certs)
                }
                // Go's rule: the system's CA certificates.
                None => (system_roots(), Vec::new()),
            };
            if roots.is_empty() {
                tracing::warn!(
                    "tls_server_config.client_auth_type {:?} without client_ca_file, and no system CA certificate was found (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs): every client certificate will be refused",
                    tls.client_auth
                );
                Arc::new(Unchecked { mandatory, accept: false, algorithms })
            } else {
                let mut builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
                if !mandatory {
                    builder = builder.allow_unauthenticated();
                }
                if tls.client_ca.is_none() {
                    // As Go: no list of acceptable CAs in the request (it would name every system CA).
                    builder = builder.clear_root_hint_subjects();
                }
                let inner = builder
                    .build()
                    .map_err(|e| ("client_ca_file", format!("cannot verify clients with it: {e}")))?;
                if pinned.is_empty() {
                    inner
                } else {
                    Arc::new(Pinned { inner, pinned })
                }
            }
        }
    };
    if tls.client_allowed_sans.is_empty() {
        return Ok(verifier);
    }
    let names = tls
        .client_allowed_sans
        .iter()
        .map(|s| ServerName::try_from(s.clone()).map_err(|e| ("client_allowed_sans", format!("{s:?}: {e}"))))
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(AllowedSans { inner: verifier, names }))
}

fn ca_key(ca: &PemSource) -> &'static str {
    if matches!(ca, PemSource::File(_)) {
        "client_ca_file"
    } else {
        "client_ca"
    }
}

/// The certificates of `client_ca_file` (or `client_ca`): at least one.
fn client_ca(ca: &PemSource) -> Result<Vec<CertificateDer<'static>>, KeyError> {
    let bytes = ca.read().map_err(|e| (ca_key(ca), e))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| (ca_key(ca), format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err((ca_key(ca), "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
    }
    Ok(certs)
}

/// The system's CA certificates, read once per process as Go's `x509.SystemCertPool` is: the files
/// that `SSL_CERT_FILE` and `SSL_CERT_DIR` name, or else the distribution's bundle
/// (`/etc/ssl/certs/ca-certificates.crt` on Debian). Those that do not parse are left out, as Go does.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::debug!(%error, "a system CA certificate could not be read");
            }
            let mut store = RootCertStore::empty();
            store.add_parsable_certificates(found.certs);
            Arc::new(store)
        })
        .clone()
}

/// The reason `error` (a failed TLS handshake) gives, when it is about the client's certificate:
/// none sent where one is required, or one refused.
pub(super) fn client_certificate_refusal(error: &rustls::Error) -> Option<String> {
    match error {
        rustls::Error::NoCertificatesPresented => {
            Some("no client certificate was sent, and client_auth_type requires one".into())
        }
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => Some(
            "the client certificate is not signed by client_ca_file's CA (or by a system CA when there is no client_ca_file)"
                .into(),
        ),
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(e)))
            if e.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity) =>
        {
            Some("the client certificate is a CA certificate (basicConstraints CA:TRUE): rustls takes one only when it is itself in client_ca_file".into())
        }
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(why))) => {
            Some(format!("the client certificate is refused: {why}"))
        }
        rustls::Error::InvalidCertificate(why) => Some(format!("the client certificate is refused: {why}")),
        _ => None,
    }
}

/// `VerifyClientCertIfGiven` and `RequireAndVerifyClientCert` with a `client_ca_file`: a certificate
/// that is itself in that file is taken as it is, while it is valid and allows client
/// authentication (Go's rule: a certificate found among the roots is a chain of its own). webpki
/// would refuse such a certificate when it is a CA's (a self-signed `CA:TRUE` certificate, as
/// exporter-toolkit's tests use); anything else goes to `inner`.
#[derive(Debug)]
struct Pinned {
    inner: Arc<dyn ClientCertVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

/// Whether `cert` is valid at `now` and its extended key usage (if any) allows client
/// authentication, as Go checks a certificate that is one of the roots.
fn pinned_cert_usable(cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), rustls::Error> {
    let other = |why: String| {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Refusal(why)))))
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(cert)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let at = x509_parser::time::ASN1Time::from_timestamp(secs)
        .map_err(|e| other(format!("cannot compare the time {secs} with its validity: {e}")))?;
    if !parsed.validity().is_valid_at(at) {
        return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
    }
    match parsed.extended_key_usage() {
        Ok(None) => Ok(()),
        Ok(Some(eku)) if eku.value.any || eku.value.client_auth => Ok(()),
        Ok(Some(_)) => Err(rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose)),
        Err(e) => Err(other(format!("its extended key usage cannot be read: {e}"))),
    }
}

impl ClientCertVerifier for Pinned {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
            pinned_cert_usable(end_entity, now)?;
            return Ok(ClientCertVerified::assertion());
        }
        self.inner.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Why a client certificate was refused, where rustls has no variant for it.
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// A client certificate asked for with no chain to check: `RequestClientCert` and
/// `RequireAnyClientCert` take any (`accept`; the handshake still proves that the client holds its
/// key), and the `Verify` types with no CA certificate at all (no `client_ca_file`, none in the
/// system) take none.
#[derive(Debug)]
struct Unchecked {
    mandatory: bool,
    accept: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for Unchecked {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.accept {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: after `inner`, the certificate must be valid for one of `names`.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self.names.iter().any(|n| cert.verify_is_valid_for_subject_name(n).is_ok()) {
            Ok(verified)
        } else {
            let why = Refusal("it names none of client_allowed_sans".into());
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(why)))))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What identifies one version of a file: its size, mtime and inode (a rename gives a new one).
type Stamp = Option<(u64, Option<SystemTime>, u64)>;

fn stamp(source: &PemSource) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    match source {
        PemSource::Inline(_) => None,
        PemSource::File(path) => std::fs::metadata(path).ok().map(|m| (m.len(), m.modified().ok(), m.ino())),
    }
}

/// The server certificate, re-read when its files change: looked at (size, mtime, inode) at most
/// once per [`CERT_CHECK_INTERVAL`], in a handshake. A new pair that cannot be used (a
/// half-written file, a key of another certificate) keeps the old one in use, logs why, and is
/// tried again at the next look.
#[derive(Debug)]
struct ReloadingCert {
    cert: PemSource,
    key: PemSource,
    provider: Arc<CryptoProvider>,
    state: Mutex<CertState>,
}

#[derive(Debug)]
struct CertState {
    checked: Instant,
    stamps: (Stamp, Stamp),
    failed: Option<(Stamp, Stamp)>,
    current: Arc<CertifiedKey>,
}

impl ReloadingCert {
    fn new(
        cert: PemSource,
        key: PemSource,
        provider: Arc<CryptoProvider>,
    ) -> Result<ReloadingCert, KeyError> {
        let stamps = (stamp(&cert), stamp(&key));
        let current = Arc::new(load_pair(&cert, &key, &provider)?);
        let state = Mutex::new(CertState { checked: Instant::now(), stamps, failed: None, current });
        Ok(ReloadingCert { cert, key, provider, state })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() < CERT_CHECK_INTERVAL {
            return state.current.clone();
        }
        state.checked = Instant::now();
        let stamps = (stamp(&self.cert), stamp(&self.key));
        if stamps == state.stamps {
            return state.current.clone();
        }
        match load_pair(&self.cert, &self.key, &self.provider) {
            Ok(pair) => {
                tracing::info!(cert = ?self.cert, "TLS certificate reloaded");
                state.current = Arc::new(pair);
                state.stamps = stamps;
                state.failed = None;
            }
            Err((key, why)) => {
                if state.failed.as_ref() != Some(&stamps) {
                    tracing::warn!(
                        key = %format!("tls_server_config.{key}"),
                        %why,
                        "the changed TLS certificate or key cannot be used: keeping the previous pair"
                    );
                }
                state.failed = Some(stamps);
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> PemSource {
        PemSource::File(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/web-tls").join(name),
        )
    }

    #[test]
    fn a_pair_loads_and_a_mismatched_one_is_refused() {
        let provider = rustls::crypto::ring::default_provider();
        assert!(load_pair(&data("server.pem"), &data("server.key"), &provider).is_ok());
        let (key, why) = load_pair(&data("server.pem"), &data("rotated.key"), &provider).unwrap_err();
        assert_eq!(key, "key_file", "{why}");
        let (key, why) = load_pair(&data("missing.pem"), &data("server.key"), &provider).unwrap_err();
        assert_eq!(key, "cert_file");
        assert!(why.contains("missing.pem"), "{why}");
        let (key, _) = load_pair(&data("server.key"), &data("server.key"), &provider).unwrap_err();
        assert_eq!(key, "cert_file");
        let (key, _) = load_pair(&data("server.pem"), &data("server.pem"), &provider).unwrap_err();
        assert_eq!(key, "key_file");
    }

    fn der(name: &str) -> CertificateDer<'static> {
        let PemSource::File(path) = data(name) else { unreachable!() };
        CertificateDer::pem_file_iter(path).unwrap().next().unwrap().unwrap()
    }

    #[test]
    fn a_pinned_certificate_must_be_valid_and_allow_client_auth() {
        let now = UnixTime::now();
        // Self-signed, CA:TRUE, extended key usage clientAuth (as the toolkit's client_selfsigned.pem).
        assert!(pinned_cert_usable(&der("stranger.pem"), now).is_ok());
        // Valid until 2126: a time after that is refused, as before its start.
        let later = UnixTime::since_unix_epoch(Duration::from_secs(200 * 365 * 86_400));
        let err = pinned_cert_usable(&der("stranger.pem"), later).unwrap_err();
        assert_eq!(err, rustls::Error::InvalidCertificate(CertificateError::Expired));
        let before = UnixTime::since_unix_epoch(Duration::from_secs(86_400));
        assert!(pinned_cert_usable(&der("stranger.pem"), before).is_err());
        // Extended key usage serverAuth only: not a client's.
        let err = pinned_cert_usable(&der("server.pem"), now).unwrap_err();
        assert_eq!(err, rustls::Error::InvalidCertificate(CertificateError::InvalidPurpose));
        assert!(pinned_cert_usable(&CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01]), now).is_err());
    }

    #[test]
    fn a_pinned_certificate_is_taken_and_others_go_to_webpki() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(der("stranger.pem")).unwrap();
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let now = UnixTime::now();
        // webpki alone refuses the CA certificate as a client's...
        let refused = inner.verify_client_cert(&der("stranger.pem"), &[], now).unwrap_err();
        assert!(client_certificate_refusal(&refused).unwrap().contains("CA:TRUE"), "{refused}");
        // ...pinned, it is taken; another CA's certificate is still refused (by webpki).
        let pinned = Pinned { inner, pinned: vec![der("stranger.pem")] };
        assert!(pinned.verify_client_cert(&der("stranger.pem"), &[], now).is_ok());
        let refused = pinned.verify_client_cert(&der("client.pem"), &[], now).unwrap_err();
        assert!(client_certificate_refusal(&refused).unwrap().contains("not signed by"), "{refused}");
        // client_allowed_sans on top: its own reason, in words.
        let names = vec![ServerName::try_from("elsewhere.test").unwrap()];
        let sans = AllowedSans { inner: Arc::new(pinned), names };
        let refused = sans.verify_client_cert(&der("stranger.pem"), &[], now).unwrap_err();
        assert_eq!(
            client_certificate_refusal(&refused).unwrap(),
            "the client certificate is refused: it names none of client_allowed_sans"
        );
    }

    #[test]
    fn only_client_certificate_failures_are_refusals() {
        let why = client_certificate_refusal(&rustls::Error::NoCertificatesPresented).unwrap();
        assert!(why.contains("no client certificate"), "{why}");
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert!(client_certificate_refusal(&expired).unwrap().contains("Expired"));
        assert_eq!(client_certificate_refusal(&rustls::Error::DecryptError), None);
        assert_eq!(client_certificate_refusal(&rustls::Error::HandshakeNotComplete), None);
    }

    #[test]
    fn a_bad_new_pair_keeps_the_old_one_and_a_good_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let copy = |from: &str, to: &std::path::Path| {
            let PemSource::File(src) = data(from) else { unreachable!() };
            let tmp = to.with_extension("tmp");
            std::fs::copy(src, &tmp).unwrap();
            std::fs::rename(tmp, to).unwrap();
        };
        copy("server.pem", &cert);
        copy("server.key", &key);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let reloading =
            ReloadingCert::new(PemSource::File(cert.clone()), PemSource::File(key.clone()), provider)
                .unwrap();
        let first = reloading.current().cert[0].clone();
        let age = |r: &ReloadingCert| r.state.lock().unwrap().checked -= CERT_CHECK_INTERVAL;
        // Only the certificate changes: the pair does not match, the old one stays.
        copy("rotated.pem", &cert);
        age(&reloading);
        assert_eq!(reloading.current().cert[0], first);
        // Then the key: the new pair is taken.
        copy("rotated.key", &key);
        age(&reloading);
        let PemSource::File(rotated) = data("rotated.pem") else { unreachable!() };
        let rotated = CertificateDer::pem_file_iter(rotated).unwrap().next().unwrap().unwrap();
        assert_eq!(reloading.current().cert[0], rotated);
        assert_ne!(rotated, first);
    }
}
