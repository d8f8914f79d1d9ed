//! What a request costs: a number of units, or its response's size.

use crate::error::{Error, ErrorKind};

/// A request costs this many units unless the rule says otherwise.
pub const DEFAULT_COST: u32 = 1;

/// A cost: a whole number of units from 1 to `u32::MAX`.
pub fn cost(value: i128) -> Result<u32, Error> {
    match value {
        v if v < 0 => Err(Error::new(ErrorKind::CostNegative)),
        0 => Err(Error::new(ErrorKind::CostZero)),
        v => u32::try_from(v).map_err(|_| Error::new(ErrorKind::CostTooLarge)),
    }
}

/// What a request costs: a fixed number of units, or its response's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cost {
    /// `cost = 5`: this many units, charged before the handler runs.
    Units(u32),
    /// `cost = response_bytes(per = 1024)` (`cost = "response_bytes:1024"`):
    /// one unit is reserved before the handler runs (a client with no room
    /// left is refused), and the request is settled at
    /// `max(1, ceil(bytes / per))` units once its response body has been
    /// sent (or dropped part way).
    ResponseBytes {
        /// Response bytes one unit pays for (at least 1).
        per: u32,
    },
}

impl Cost {
    /// The units charged before the handler runs.
    pub fn reserved(&self) -> u32 {
        match self {
            Cost::Units(n) => *n,
            Cost::ResponseBytes { .. } => 1,
        }
    }

    /// Response bytes per unit when the cost is the response's size.
    pub fn bytes_per_unit(&self) -> Option<u32> {
        match self {
            Cost::Units(_) => None,
            Cost::ResponseBytes { per } => Some(*per),
        }
    }

    /// The units a response of `bytes` bytes costs, at `per` bytes a unit:
    /// at least 1 (an empty response still used a request), at most
    /// `u32::MAX`.
    pub fn units_for(bytes: u64, per: u32) -> u32 {
        let per = u64::from(per.max(1));
        let units = bytes.div_ceil(per);
        u32::try_from(units.max(1)).unwrap_or(u32::MAX)
    }
}

/// The cost kinds that are not a plain number, as both surfaces spell them.
pub const COST_KINDS: [&str; 1] = ["response_bytes"];

/// `response_bytes(per = N)` / `"response_bytes:N"`: the bytes one unit
/// pays for, from 1 to `u32::MAX`.
pub fn response_bytes(per: i128) -> Result<Cost, Error> {
    match per {
        v if v < 0 => Err(Error::new(ErrorKind::BytesPerUnitNegative)),
        0 => Err(Error::new(ErrorKind::BytesPerUnitZero)),
        v => u32::try_from(v)
            .map(|per| Cost::ResponseBytes { per })
            .map_err(|_| Error::new(ErrorKind::BytesPerUnitTooLarge)),
    }
}

/// A cost as the configuration writes it when it is not a number:
/// `"response_bytes:1024"`.
pub fn cost_text(text: &str) -> Result<Cost, Error> {
    let text = text.trim();
    let (kind, arg) = text.split_once(':').unwrap_or((text, ""));
    match kind.trim() {
        "response_bytes" => {
            let arg = arg.trim();
            let digits = arg.strip_prefix('-').unwrap_or(arg);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::new(ErrorKind::BytesPerUnitNotANumber(arg.to_owned())));
            }
            if arg.starts_with('-') {
                return Err(Error::new(ErrorKind::BytesPerUnitNegative));
            }
            match arg.parse::<i128>() {
                Ok(per) => response_bytes(per),
                Err(_) => Err(Error::new(ErrorKind::BytesPerUnitTooLarge)),
            }
        }
        _ => Err(Error::new(ErrorKind::UnknownCost(text.to_owned()))),
    }
}

/// An unknown cost kind, as the attribute names it (`cost = bytes(..)`).
pub fn unknown_cost(kind: &str) -> Error {
    Error::new(ErrorKind::UnknownCost(kind.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_bytes_costs() {
        assert_eq!(cost_text("response_bytes:1024"), Ok(Cost::ResponseBytes { per: 1024 }));
        assert_eq!(cost_text(" response_bytes : 1 "), response_bytes(1));
        assert!(cost_text("response_bytes:0").is_err());
        assert!(cost_text("response_bytes:-5").is_err());
        assert!(cost_text("response_bytes:99999999999").is_err());
        assert!(cost_text("response_bytes:").is_err());
        assert!(cost_text("response_bytes:+5").is_err());
        assert!(cost_text("response_bytes:1_024")
            .unwrap_err()
            .to_string()
            .contains("not a whole number"));
        assert!(cost_text("response_bytes:0x10").is_err());
        assert!(cost_text("response_bytes").is_err());
        assert!(cost_text("bytes:5").is_err());
        assert_eq!(Cost::units_for(0, 1024), 1);
        assert_eq!(Cost::units_for(1, 1024), 1);
        assert_eq!(Cost::units_for(1024, 1024), 1);
        assert_eq!(Cost::units_for(1025, 1024), 2);
        assert_eq!(Cost::units_for(u64::MAX, 1), u32::MAX);
        assert_eq!(Cost::units_for(10, 0), 10);
        assert_eq!(Cost::Units(3).reserved(), 3);
        assert_eq!(Cost::ResponseBytes { per: 7 }.reserved(), 1);
    }
}
