//! Serde helpers that keep non-UTF-8 paths: a path is written as a JSON string when it is valid
//! UTF-8 and as an array of bytes otherwise.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr {
    Str(String),
    Bytes(Vec<u8>),
}

fn to_repr(p: &Path) -> Repr {
    match p.to_str() {
        Some(s) => Repr::Str(s.to_owned()),
        None => Repr::Bytes(p.as_os_str().as_bytes().to_vec()),
    }
}

fn from_repr(r: Repr) -> PathBuf {
    match r {
        Repr::Str(s) => PathBuf::from(s),
        Repr::Bytes(b) => PathBuf::from(OsString::from_vec(b)),
    }
}

/// One path.
pub(crate) mod one {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        to_repr(p).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Repr::deserialize(d).map(from_repr)
    }
}

/// A list of paths.
pub(crate) mod many {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let r: Vec<Repr> = v.iter().map(|p| to_repr(p)).collect();
        r.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Ok(Vec::<Repr>::deserialize(d)?
            .into_iter()
            .map(from_repr)
            .collect())
    }
}
