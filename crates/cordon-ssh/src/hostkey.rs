//! Host keys as the wire carries them, and the one check that makes a session binding worth
//! anything: the host key's signature over the session identifier.

use base64::Engine;
use ring::signature::{self, UnparsedPublicKey};

use crate::wire::{Reader, WireError};

/// Why a host key's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A key type this proxy cannot check (certificates, P-521, DSA, security keys): the
    /// binding is refused rather than taken on trust.
    #[error("host key type {0} is not supported")]
    Unsupported(String),
    /// The signature's algorithm does not belong to the key's type.
    #[error("signature algorithm {sig} does not match host key type {key}")]
    Mismatch { key: String, sig: String },
    /// The signature does not verify.
    #[error("the host key's signature over the session does not verify")]
    Bad,
}

/// The `SHA256:…` fingerprint OpenSSH prints for a public key blob.
pub fn fingerprint(blob: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, blob);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(d.as_ref())
    )
}

/// Checks that `sig_blob` (`string alg || string sig`) is `key_blob`'s signature of `data`.
pub fn verify(key_blob: &[u8], data: &[u8], sig_blob: &[u8]) -> Result<(), VerifyError> {
    let mut k = Reader::new(key_blob);
    let kt = String::from_utf8_lossy(k.string()?).into_owned();
    let mut s = Reader::new(sig_blob);
    let st = String::from_utf8_lossy(s.string()?).into_owned();
    let sig = s.string()?;
    s.end()?;
    let mismatch = || VerifyError::Mismatch {
        key: kt.clone(),
        sig: st.clone(),
    };
    let ok = match kt.as_str() {
        "ssh-ed25519" => {
            if st != kt {
                return Err(mismatch());
            }
            let pk = k.string()?;
            k.end()?;
            UnparsedPublicKey::new(&signature::ED25519, pk).verify(data, sig)
        }
        "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" => {
            if st != kt {
                return Err(mismatch());
            }
            let (curve, alg, width): (&[u8], &'static signature::EcdsaVerificationAlgorithm, _) =
                if kt.ends_with("256") {
                    (b"nistp256", &signature::ECDSA_P256_SHA256_FIXED, 32)
                } else {
                    (b"nistp384", &signature::ECDSA_P384_SHA384_FIXED, 48)
                };
            if k.string()? != curve {
                return Err(WireError("ECDSA key names another curve").into());
            }
            let q = k.string()?;
            k.end()?;
            let mut rs = Reader::new(sig);
            let fixed = fixed_rs(rs.mpint()?, rs.mpint()?, width)?;
            rs.end()?;
            UnparsedPublicKey::new(alg, q).verify(data, &fixed)
        }
        "ssh-rsa" => {
            let params: &'static signature::RsaParameters = match st.as_str() {
                "rsa-sha2-256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "rsa-sha2-512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                // Still what an older server signs with; OpenSSH's own agent takes it too.
                "ssh-rsa" => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
                _ => return Err(mismatch()),
            };
            let e = k.mpint()?;
            let n = k.mpint()?;
            k.end()?;
            signature::RsaPublicKeyComponents { n, e }.verify(params, data, sig)
        }
        other => return Err(VerifyError::Unsupported(other.to_string())),
    };
    ok.map_err(|_| VerifyError::Bad)
}

/// ECDSA's `(r, s)` as the fixed-width concatenation ring verifies.
fn fixed_rs(r: &[u8], s: &[u8], width: usize) -> Result<Vec<u8>, WireError> {
    if r.len() > width || s.len() > width {
        return Err(WireError("ECDSA signature wider than its curve"));
    }
    let mut out = vec![0u8; 2 * width];
    out[width - r.len()..width].copy_from_slice(r);
    out[2 * width - s.len()..].copy_from_slice(s);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::{put_mpint, put_string};
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};

    /// A fresh Ed25519 host key: its blob, and a signer producing SSH signature blobs.
    pub(crate) fn ed25519() -> (Vec<u8>, impl Fn(&[u8]) -> Vec<u8>) {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let kp = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let mut blob = Vec::new();
        put_string(&mut blob, b"ssh-ed25519");
        put_string(&mut blob, kp.public_key().as_ref());
        let sign = move |data: &[u8]| {
            let mut s = Vec::new();
            put_string(&mut s, b"ssh-ed25519");
            put_string(&mut s, kp.sign(data).as_ref());
            s
        };
        (blob, sign)
    }

    #[test]
    fn ed25519_signatures_verify_and_forgeries_do_not() {
        let (blob, sign) = ed25519();
        let sig = sign(b"session-id");
        verify(&blob, b"session-id", &sig).unwrap();
        assert_eq!(verify(&blob, b"other-id", &sig), Err(VerifyError::Bad));
        let (other, _) = ed25519();
        assert_eq!(verify(&other, b"session-id", &sig), Err(VerifyError::Bad));
        assert!(fingerprint(&blob).starts_with("SHA256:"));
    }

    #[test]
    fn ecdsa_signatures_verify_from_their_mpints() {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let kp = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let mut blob = Vec::new();
        put_string(&mut blob, b"ecdsa-sha2-nistp256");
        put_string(&mut blob, b"nistp256");
        put_string(&mut blob, kp.public_key().as_ref());
        let fixed = kp.sign(&rng, b"sid").unwrap();
        let mut inner = Vec::new();
        put_mpint(&mut inner, &fixed.as_ref()[..32]);
        put_mpint(&mut inner, &fixed.as_ref()[32..]);
        let mut sig = Vec::new();
        put_string(&mut sig, b"ecdsa-sha2-nistp256");
        put_string(&mut sig, &inner);
        verify(&blob, b"sid", &sig).unwrap();
        assert_eq!(verify(&blob, b"sid2", &sig), Err(VerifyError::Bad));
    }

    #[test]
    fn mismatched_and_unknown_types_are_refused() {
        let (blob, sign) = ed25519();
        let mut sig = Vec::new();
        put_string(&mut sig, b"rsa-sha2-256");
        put_string(&mut sig, &sign(b"x")[19..]);
        assert!(matches!(
            verify(&blob, b"x", &sig),
            Err(VerifyError::Mismatch { .. })
        ));
        let mut cert = Vec::new();
        put_string(&mut cert, b"ssh-ed25519-cert-v01@openssh.com");
        assert!(matches!(
            verify(&cert, b"x", &sign(b"x")),
            Err(VerifyError::Unsupported(_))
        ));
    }
}
