//! Resume tokens: `<expiry unix seconds>.<base64url, no padding, of HMAC-SHA256(secret, run id,
//! subject, expiry)>`, minted on every response of a route that hands them out and checked in
//! constant time. Never stored: a token carries everything needed to check it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::state::auth::Owner;
use crate::vocab::RunId;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8], run: &RunId, owner: &Owner, expiry: u64) -> Option<HmacSha256> {
    let mut m = HmacSha256::new_from_slice(secret).ok()?;
    m.update(run.as_bytes());
    m.update(&[0]);
    m.update(owner.as_bytes());
    m.update(&[0]);
    m.update(expiry.to_string().as_bytes());
    Some(m)
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A token for `run` (the id the client will name it by) and `owner`, valid until `expiry`.
pub fn mint(secret: &[u8], run: &RunId, owner: &Owner, expiry: u64) -> String {
    let sig = mac(secret, run, owner, expiry)
        .map(|m| URL_SAFE_NO_PAD.encode(m.finalize().into_bytes()))
        .unwrap_or_default();
    format!("{expiry}.{sig}")
}

/// Whether `token` was minted for `run` and `owner` with `secret` and has not expired at `now`.
pub fn verify(secret: &[u8], run: &RunId, owner: &Owner, token: &str, now: u64) -> bool {
    let Some((expiry, sig)) = token.split_once('.') else {
        return false;
    };
    let Ok(expiry) = expiry.parse::<u64>() else {
        return false;
    };
    if expiry < now {
        return false;
    }
    let Ok(sig) = URL_SAFE_NO_PAD.decode(sig) else {
        return false;
    };
    mac(secret, run, owner, expiry).is_some_and(|m| m.verify_slice(&sig).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_checks_for_its_run_and_owner_until_it_expires() {
        let (secret, owner) = (b"s3cret".as_slice(), Owner::default());
        let t = mint(secret, &RunId::from("run-1"), &owner, 1_000);
        assert!(verify(secret, &RunId::from("run-1"), &owner, &t, 999));
        assert!(verify(secret, &RunId::from("run-1"), &owner, &t, 1_000));
        assert!(
            !verify(secret, &RunId::from("run-1"), &owner, &t, 1_001),
            "expired"
        );
        assert!(
            !verify(secret, &RunId::from("run-2"), &owner, &t, 999),
            "another run"
        );
        assert!(
            !verify(b"other", &RunId::from("run-1"), &owner, &t, 999),
            "another secret"
        );
        let foreign = crate::state::auth::Owner::of(b"someone");
        assert!(
            !verify(secret, &RunId::from("run-1"), &foreign, &t, 999),
            "another owner"
        );
        let (exp, sig) = t.split_once('.').unwrap();
        let later = format!("{}.{sig}", exp.parse::<u64>().unwrap() + 100);
        assert!(
            !verify(secret, &RunId::from("run-1"), &owner, &later, 999),
            "expiry is signed"
        );
        for junk in ["", ".", "x.y", "1000", "1000.", "1000.!!"] {
            assert!(
                !verify(secret, &RunId::from("run-1"), &owner, junk, 999),
                "{junk:?}"
            );
        }
    }
}
