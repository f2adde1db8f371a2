//! `tls_server_config` as a rustls server (ring provider): the certificate re-read when its files
//! change, client certificates per `client_auth_type`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};

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
    let ca_key =
        |ca: &PemSource| if matches!(ca, PemSource::File(_)) { "client_ca_file" } else { "client_ca" };
    let roots = |required: bool| -> Result<Option<Arc<RootCertStore>>, KeyError> {
        let Some(ca) = &tls.client_ca else {
            return if required {
                Err(("client_auth_type", "needs client_ca_file".into()))
            } else {
                Ok(None)
            };
        };
        let bytes = ca.read().map_err(|e| (ca_key(ca), e))?;
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            let cert = cert.map_err(|e| (ca_key(ca), format!("not a PEM certificate: {e}")))?;
            store.add(cert).map_err(|e| (ca_key(ca), format!("not a usable CA certificate: {e}")))?;
        }
        if store.is_empty() {
            return Err((ca_key(ca), "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
        }
        Ok(Some(Arc::new(store)))
    };
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ClientCertVerifier> = match tls.client_auth {
        ClientAuth::NoClientCert => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::RequestClientCert => Arc::new(AnyClientCert { mandatory: false, algorithms }),
        ClientAuth::RequireAnyClientCert => Arc::new(AnyClientCert { mandatory: true, algorithms }),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let roots = roots(true)?.ok_or(("client_auth_type", "needs client_ca_file".to_owned()))?;
            let builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
            let builder = if tls.client_auth == ClientAuth::VerifyClientCertIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder.build().map_err(|e| ("client_ca_file", format!("cannot verify clients with it: {e}")))?
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

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked for but not verified
/// (the handshake still proves that the client holds its key).
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
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
        Ok(ClientCertVerified::assertion())
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
            .map_err(|e| rustls::Error::General(format!("cannot read the client certificate: {e}")))?;
        if self.names.iter().any(|n| cert.verify_is_valid_for_subject_name(n).is_ok()) {
            Ok(verified)
        } else {
            Err(rustls::Error::General("the client certificate names none of client_allowed_sans".into()))
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
