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

    /// An RSA-2048 host key (openssl genrsa; e = 65537) and its PKCS#1 v1.5 signatures of
    /// `session-id-rsa`: ring verifies RSA but cannot make keys, so these are fixed.
    const RSA_N: &str = concat!(
        "98184e4f24ab3633605a48636a0c1299b4064baa19a71c2175c696880df443866ae4f7143e5de2ef",
        "dd9209b5e245e4abb103597cdcbab243998e8db4ce3c94a132320817a2dc6e013b65d7dcddefa349",
        "1f5d5242237d3552b0b2656e19cbc1a1e60921f94641fa3fe4bf3fa4fb69aba0be6b416be592111f",
        "5507c4519583a3609345e62c93c4589f658648fd9486ff9610652e22356ce1898f536b7fafdd1fe0",
        "c888d9c1463d112fed807425ee5ae01b6d98024a6643070b34c03b3f973028ad187b9410726c41b8",
        "b67e56196318c1ef6d6fb05ceaa5ba8cf709a360d088e3fa05f8ee86f73d2a23bb96b5fb661efca5",
        "3d6560008b943cedd8444ccbdb1015f9",
    );
    const RSA_SHA256: &str = concat!(
        "566f4688824353bc7ece49b715abc62f6046dd956c9fb7c6aa192602b6838437e5166b9681d1c8fb",
        "ede8ab95a7c396d95f98d3485a9472e20537f01a5bc73030611bb2aa408061efa4603145b1b1218c",
        "63dd4a38e915ac2baf6f9362f56eee84b1113313a0a0d79280454c66a1210045ab4eb4fe639fb189",
        "a083bcfe6752fa1f354611b96594780f09ffa20e0c31c7b8ffea581dce1970682550ff9fa9ced38f",
        "73815235da9150b5604399e86918df39f4698a765a4b95019b5264f2c01ae7c129dfa1aca94af93c",
        "fcad88860dca7ab193225e09f0ad4434dd2ccf74d6288ca0fa02e4c61a14f56c0209dfde46cc9cab",
        "a736aad38a4991f38fa088e65454c0e1",
    );
    const RSA_SHA512: &str = concat!(
        "4550349408f2aed045a518cf58974eb7b39dd8e663a7da56a79ce783f5c523bd6ac83e2ba32b46f3",
        "a1238dcbb822da4c4757294059d18843f8e4675d259aed5a8d10d3acf983009a780fbd764a3c252a",
        "dd3d2533c9897c4f0964b289e124f637ca011d2aa032eeae5153ff1eb2130aa0570a1077cad19680",
        "50f66af5628757ef2ca63882411c37301027ea82cb15cbe0ee10865d1604755e9dc8ccdcc1b86aed",
        "eb99756e78c5afd605739ba1b0bfff4f1b87061f074c4cc9b757ab35cd5d55386bc2381b0c53edce",
        "5bb2c02306dc65a365e3e0f10bee31ce96ada0fae8fac38cffb2c1af30aefcf6cba3e47ad2c7fdfd",
        "a2005962c6121654d06c306290848059",
    );

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rsa_sha2_signatures_verify_and_the_algorithm_must_be_rsa() {
        let mut blob = Vec::new();
        put_string(&mut blob, b"ssh-rsa");
        put_mpint(&mut blob, &[1, 0, 1]);
        put_mpint(&mut blob, &unhex(RSA_N));
        let sig = |alg: &[u8], hex: &str| {
            let mut s = Vec::new();
            put_string(&mut s, alg);
            put_string(&mut s, &unhex(hex));
            s
        };
        verify(&blob, b"session-id-rsa", &sig(b"rsa-sha2-256", RSA_SHA256)).unwrap();
        verify(&blob, b"session-id-rsa", &sig(b"rsa-sha2-512", RSA_SHA512)).unwrap();
        assert_eq!(
            verify(&blob, b"session-id-rsa", &sig(b"rsa-sha2-512", RSA_SHA256)),
            Err(VerifyError::Bad)
        );
        assert_eq!(
            verify(&blob, b"other", &sig(b"rsa-sha2-256", RSA_SHA256)),
            Err(VerifyError::Bad)
        );
        assert!(matches!(
            verify(&blob, b"session-id-rsa", &sig(b"ssh-ed25519", RSA_SHA256)),
            Err(VerifyError::Mismatch { .. })
        ));
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
