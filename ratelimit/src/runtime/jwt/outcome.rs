//! What each token check found: the outcome of every token that reached
//! the verifier past its caches, counted so that a misconfiguration (a
//! wrong issuer, an audience the provider does not put in its tokens, keys
//! that do not match) shows in `ratelimit_jwt_verifications_total` rather
//! than every user quietly becoming anonymous.

use std::sync::atomic::{AtomicU64, Ordering};

use jsonwebtoken::errors::ErrorKind;

/// The outcome of checking one token, a label of
/// `ratelimit_jwt_verifications_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verification {
    Verified,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    UnknownKey,
    BadSignature,
    Malformed,
    /// Not checked: the failed-check budget of its address had no room.
    NotChecked,
}

impl Verification {
    /// Every outcome, in the order of the labels.
    pub(crate) const ALL: [Verification; 9] = [
        Verification::Verified,
        Verification::Expired,
        Verification::NotYetValid,
        Verification::WrongIssuer,
        Verification::WrongAudience,
        Verification::UnknownKey,
        Verification::BadSignature,
        Verification::Malformed,
        Verification::NotChecked,
    ];

    /// The metric's label.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::Expired => "expired",
            Verification::NotYetValid => "not_yet_valid",
            Verification::WrongIssuer => "wrong_issuer",
            Verification::WrongAudience => "wrong_audience",
            Verification::UnknownKey => "unknown_key",
            Verification::BadSignature => "bad_signature",
            Verification::Malformed => "malformed",
            Verification::NotChecked => "not_checked",
        }
    }

    /// What `jsonwebtoken` refused a token for.
    pub(crate) fn of_error(e: &jsonwebtoken::errors::Error) -> Verification {
        match e.kind() {
            ErrorKind::ExpiredSignature => Verification::Expired,
            ErrorKind::ImmatureSignature => Verification::NotYetValid,
            ErrorKind::InvalidIssuer => Verification::WrongIssuer,
            ErrorKind::InvalidAudience => Verification::WrongAudience,
            ErrorKind::MissingRequiredClaim(c) if c == "iss" => Verification::WrongIssuer,
            ErrorKind::MissingRequiredClaim(c) if c == "aud" => Verification::WrongAudience,
            ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                Verification::BadSignature
            }
            _ => Verification::Malformed,
        }
    }
}

/// How many tokens met each outcome, since the verifier was built.
#[derive(Debug, Default)]
pub(crate) struct Counts([AtomicU64; 9]);

impl Counts {
    /// Counts one token. Only tokens past the caches are counted (a cached
    /// verified token, or the same forgery again, is not checked again), so
    /// this is not on the path of a client whose token is cached.
    pub(crate) fn record(&self, outcome: Verification) -> Option<crate::runtime::claims::VerifiedClaims> {
        self.0[outcome as usize].fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Every outcome's count, with its label.
    pub(crate) fn snapshot(&self) -> [(&'static str, u64); 9] {
        Verification::ALL.map(|v| (v.label(), self.0[v as usize].load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_in_the_order_of_the_counts() {
        let counts = Counts::default();
        counts.record(Verification::WrongIssuer);
        counts.record(Verification::WrongIssuer);
        counts.record(Verification::NotChecked);
        let snapshot = counts.snapshot();
        assert_eq!(snapshot[3], ("wrong_issuer", 2));
        assert_eq!(snapshot[8], ("not_checked", 1));
        assert_eq!(snapshot.iter().map(|(_, n)| n).sum::<u64>(), 3);
    }
}
