//! cordon's interception CA and the leaf certificates it signs.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use thiserror::Error;

/// The CA's subject. Fixed, so the issuer can be rebuilt from the stored key alone; CAs of
/// different machines are told apart by their keys (the key identifiers in every leaf).
const CA_NAME: &str = "cordon local interception CA";
/// Leaf certificates kept; past this the cache starts over (signing one takes ~100 µs).
const MAX_CACHED: usize = 4096;

/// Why the CA cannot be used.
#[derive(Debug, Error)]
pub enum CaError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key or certificate is unusable, or a certificate could not be made.
    #[error("{what}: {detail}")]
    Crypto {
        /// What was being done.
        what: String,
        /// The library's message.
        detail: String,
    },
    /// The CA key file is readable by others: refuse to use (or extend trust to) it.
    #[error(
        "{0} is readable by other users (mode {1:o}); it must be 0600. Delete the directory to make a new CA."
    )]
    Exposed(PathBuf, u32),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn crypto(what: &str) -> impl FnOnce(rcgen::Error) -> CaError + '_ {
    move |e| CaError::Crypto {
        what: what.into(),
        detail: e.to_string(),
    }
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    dn.push(DnType::OrganizationName, "cordon");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

/// The CA: its key (never leaves this process), its certificate (what the sandbox trusts),
/// and a cache of leaf certificates by host.
pub struct CertAuthority {
    /// Made from `key_der` by the first leaf: checking a stored key is a P-256 operation
    /// (and ring's start-up) that a session without an intercepted connection never needs,
    /// off every start (issue #18). A new CA's is there from the start.
    issuer: OnceLock<Issuer<'static, KeyPair>>,
    /// The key as read from `key_path` (PKCS#8).
    key_der: PrivatePkcs8KeyDer<'static>,
    key_path: PathBuf,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    /// One key for every leaf of this process, as mitmproxy does: signing is the only
    /// per-host work. Made by the first leaf, not with the CA: two P-256 operations that a
    /// session without an intercepted connection never needs, off every start (issue #18).
    leaf_key: OnceLock<LeafKey>,
    cache: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

/// The leaves' key pair, and the same key as rustls signs with it.
struct LeafKey {
    key: KeyPair,
    signer: Arc<dyn rustls::sign::SigningKey>,
}

impl LeafKey {
    fn new() -> Result<Self, CaError> {
        let key =
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(crypto("make a leaf key"))?;
        let signer = rustls::crypto::ring::sign::any_ecdsa_type(&PrivateKeyDer::Pkcs8(
            PrivatePkcs8KeyDer::from(key.serialize_der()),
        ))
        .map_err(|e| CaError::Crypto {
            what: "load the leaf key".into(),
            detail: e.to_string(),
        })?;
        Ok(LeafKey { key, signer })
    }
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority").finish_non_exhaustive()
    }
}

impl CertAuthority {
    /// Loads the CA from `dir` (`ca-cert.pem`, `ca-key.pem`), making it on first use: the
    /// directory 0700, the key 0600 (written before the certificate, never world-readable at
    /// any moment). A key file others can read is refused.
    pub fn load_or_create(dir: &Path) -> Result<Self, CaError> {
        let key_path = dir.join("ca-key.pem");
        let cert_path = dir.join("ca-cert.pem");
        let issuer = OnceLock::new();
        let key_der = if key_path.exists() {
            let mode = std::fs::metadata(&key_path)
                .map_err(io(&key_path))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(CaError::Exposed(key_path, mode & 0o777));
            }
            let pem = std::fs::read(&key_path).map_err(io(&key_path))?;
            use rustls::pki_types::pem::PemObject;
            PrivatePkcs8KeyDer::from_pem_slice(&pem).map_err(|e| CaError::Crypto {
                what: format!("read the CA key {}", key_path.display()),
                detail: format!("no PKCS#8 private key in it ({e})"),
            })?
        } else {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
                .map_err(crypto("make the CA key"))?;
            write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
            let _ = std::fs::remove_file(&cert_path);
            let der = PrivatePkcs8KeyDer::from(key.serialize_der());
            let _ = issuer.set(Issuer::new(ca_params(), key));
            der
        };
        let cert_pem = match std::fs::read_to_string(&cert_path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut p = ca_params();
                p.not_before = rcgen::date_time_ymd(2025, 1, 1);
                p.not_after = rcgen::date_time_ymd(2035, 1, 1);
                let ca = Self::issuer_of(&issuer, &key_der, &key_path)?;
                let cert = p
                    .self_signed(ca.key())
                    .map_err(crypto("make the CA certificate"))?;
                write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
                cert.pem()
            }
            Err(e) => return Err(io(&cert_path)(e)),
        };
        let cert_der = pem_to_der(&cert_pem).ok_or_else(|| CaError::Crypto {
            what: format!("read {}", cert_path.display()),
            detail: "no certificate in it".into(),
        })?;
        Ok(Self {
            issuer,
            key_der,
            key_path,
            cert_pem,
            cert_der,
            leaf_key: OnceLock::new(),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Checks the CA's key as the first leaf would (`cordon doctor`: a key file that is PEM
    /// but not a usable key is found before a connection needs it).
    pub fn check_key(&self) -> Result<(), CaError> {
        Self::issuer_of(&self.issuer, &self.key_der, &self.key_path).map(|_| ())
    }

    /// The issuer in `cell`, made from the key `der` at the first call. Two threads may both
    /// make one; the first stored is kept.
    fn issuer_of<'a>(
        cell: &'a OnceLock<Issuer<'static, KeyPair>>,
        der: &PrivatePkcs8KeyDer<'static>,
        path: &Path,
    ) -> Result<&'a Issuer<'static, KeyPair>, CaError> {
        if let Some(i) = cell.get() {
            return Ok(i);
        }
        let key = KeyPair::try_from(&PrivateKeyDer::Pkcs8(der.clone_key())).map_err(|e| {
            CaError::Crypto {
                what: format!("read the CA key {}", path.display()),
                detail: e.to_string(),
            }
        })?;
        Ok(cell.get_or_init(|| Issuer::new(ca_params(), key)))
    }

    /// The CA certificate (PEM), for the sandbox's trust bundle.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate (DER).
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A certificate for `host` (a DNS name or an IP address) signed by this CA, with the
    /// chain, ready for a rustls server; cached per host.
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host)
        {
            return Ok(k.clone());
        }
        let mut p = CertificateParams::new(vec![host.clone()]).map_err(crypto("name a leaf"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.as_str());
        p.distinguished_name = dn;
        p.use_authority_key_identifier_extension = true;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        // Valid from yesterday (clock skew) for a week: leaves are cheap and never stored.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        p.not_before = unix_to_offset(now.saturating_sub(86_400));
        p.not_after = unix_to_offset(now + 7 * 86_400);
        let issuer = Self::issuer_of(&self.issuer, &self.key_der, &self.key_path)?;
        let leaf_key = self.shared_leaf_key()?;
        let cert = p
            .signed_by(&leaf_key.key, issuer)
            .map_err(crypto("sign a leaf"))?;
        let key = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der.clone()],
            leaf_key.signer.clone(),
        ));
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(host, key.clone());
        Ok(key)
    }

    /// The leaves' key, made at the first call. Two threads may both make one; the first
    /// stored is every leaf's.
    fn shared_leaf_key(&self) -> Result<&LeafKey, CaError> {
        if let Some(k) = self.leaf_key.get() {
            return Ok(k);
        }
        let made = LeafKey::new()?;
        Ok(self.leaf_key.get_or_init(|| made))
    }
}

fn unix_to_offset(secs: u64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// Creates `path` with `mode` from the start (no window where it is more open), failing if it
/// exists.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// The first certificate of a PEM text, as DER.
fn pem_to_der(pem: &str) -> Option<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes()).next()?.ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    /// A full TLS handshake in memory: a client trusting only `ca` against a server
    /// presenting `ca.leaf(host)`.
    fn handshake(ca: &CertAuthority, sni: &str, host: &str) -> Result<(), rustls::Error> {
        #[derive(Debug)]
        struct One(Arc<CertifiedKey>);
        impl rustls::server::ResolvesServerCert for One {
            fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
                Some(self.0.clone())
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der().clone()).unwrap();
        let client_cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(One(ca.leaf(host).unwrap())));
        in_memory(&Arc::new(client_cfg), Arc::new(server_cfg), sni).map(|_| ())
    }

    /// A handshake in memory between `client` and `server` under `sni`, and the session
    /// tickets after it; whether it resumed an earlier session.
    pub(crate) fn in_memory(
        client: &Arc<rustls::ClientConfig>,
        server: Arc<rustls::ServerConfig>,
        sni: &str,
    ) -> Result<bool, rustls::Error> {
        let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
        let mut c = rustls::ClientConnection::new(client.clone(), name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets()?;
            let mut buf = Vec::new();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut &buf[..]).unwrap();
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() && !s.wants_write() {
                return Ok(c.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
            }
        }
        panic!("handshake did not finish");
    }

    #[test]
    fn made_once_kept_private_and_trusted_by_a_real_client() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let ca = CertAuthority::load_or_create(&ca_dir).unwrap();
        let key = ca_dir.join("ca-key.pem");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(&ca_dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        handshake(&ca, "api.example.test", "api.example.test").unwrap();
        handshake(&ca, "127.0.0.1", "127.0.0.1").unwrap();
        // The wrong name is refused by the client.
        assert!(handshake(&ca, "other.example.test", "api.example.test").is_err());
        // Reloaded: same CA certificate, and leaves of the new process still verify.
        let again = CertAuthority::load_or_create(&ca_dir).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        handshake(&again, "api.example.test", "api.example.test").unwrap();
        // Cached per host.
        assert!(Arc::ptr_eq(
            &ca.leaf("a.test").unwrap(),
            &ca.leaf("A.test.").unwrap()
        ));
        // One key, made by the first leaf, signs every leaf of the process; the stored CA
        // key too is made into the issuer by the first leaf.
        let fresh = CertAuthority::load_or_create(&ca_dir).unwrap();
        assert!(fresh.leaf_key.get().is_none(), "no leaf key before a leaf");
        assert!(fresh.issuer.get().is_none(), "no CA key pair before a leaf");
        let (x, y) = (fresh.leaf("x.test").unwrap(), fresh.leaf("y.test").unwrap());
        assert!(Arc::ptr_eq(&x.key, &y.key));
        assert!(Arc::ptr_eq(&x.key, &fresh.leaf_key.get().unwrap().signer));
    }

    #[test]
    fn a_key_file_that_is_no_key_is_refused_at_load_or_at_the_first_leaf() {
        let dir = tempfile::tempdir().unwrap();
        CertAuthority::load_or_create(dir.path()).unwrap();
        let key = dir.path().join("ca-key.pem");
        // Not PEM at all: refused at load, naming the file.
        std::fs::write(&key, "not a key\n").unwrap();
        let e = CertAuthority::load_or_create(dir.path()).unwrap_err();
        assert!(e.to_string().contains("ca-key.pem"), "{e}");
        // PEM, but not a P-256 key: the check (`cordon doctor`) and the first leaf refuse it,
        // and no leaf is ever signed with it.
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nMAMCAQA=\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let ca = CertAuthority::load_or_create(dir.path()).unwrap();
        let e = ca.check_key().unwrap_err();
        assert!(e.to_string().contains("read the CA key"), "{e}");
        assert!(e.to_string().contains("ca-key.pem"), "{e}");
        assert!(ca.leaf("x.test").is_err());
        assert!(ca.cache.lock().unwrap().is_empty());
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        CertAuthority::load_or_create(dir.path()).unwrap();
        let key = dir.path().join("ca-key.pem");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            CertAuthority::load_or_create(dir.path()),
            Err(CaError::Exposed(..))
        ));
    }

    #[test]
    fn another_ca_is_not_trusted() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ca_a = CertAuthority::load_or_create(a.path()).unwrap();
        let ca_b = CertAuthority::load_or_create(b.path()).unwrap();
        // Same subject name, different keys: b's leaves do not verify under a.
        let leaf_b = ca_b.leaf("x.test").unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_a.cert_der().clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = rustls::pki_types::ServerName::try_from("x.test").unwrap();
        use rustls::client::danger::ServerCertVerifier;
        let r = verifier.verify_server_cert(
            &leaf_b.cert[0],
            &leaf_b.cert[1..],
            &name,
            &[],
            rustls::pki_types::UnixTime::now(),
        );
        assert!(r.is_err());
    }
}
