//! Read rationing: sync rounds slower than half the interval ration the next
//! round's reads to the busiest keys (pushes are never skipped), and fast
//! rounds lift the ration again. A key not read keeps the estimate it had
//! (its last closed sum still counts).

use std::time::Duration;

/// The fewest keys a rationed round still reads.
pub(super) const MIN_READS: usize = 256;

/// Keys read per round, while rounds run long.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadRation {
    /// `None`: all.
    budget: Option<usize>,
}

impl ReadRation {
    /// The keys not to read this round, of the active keys given as
    /// `(units pushed this round, key)`: beyond the budget, the least busy.
    /// Empty (and nothing collected) while reads are not rationed.
    pub(super) fn unread(&self, active: impl Iterator<Item = (u64, u64)>) -> Vec<u64> {
        let Some(budget) = self.budget else {
            return Vec::new();
        };
        let mut active: Vec<(u64, u64)> = active.collect();
        if active.len() <= budget {
            return Vec::new();
        }
        active.sort_unstable_by(|a, b| b.cmp(a));
        active[budget..].iter().map(|&(_, key)| key).collect()
    }

    /// After a round of `keys` keys that took `took` and read `read` of
    /// them: rations the next round's reads when it took more than half the
    /// interval, doubles the ration (lifting it once it covers every key)
    /// when it took less than a quarter.
    pub(super) fn after_round(&mut self, took: Duration, interval: Duration, read: usize, keys: usize) {
        self.budget = if took * 2 > interval {
            let budget = (read / 2).max(MIN_READS);
            if self.budget.is_none() {
                tracing::warn!(
                    target: "ratelimit",
                    active = keys,
                    took_ms = took.as_millis() as u64,
                    "fleet gate: sync rounds run longer than half the interval; reading the busiest {budget} keys per round"
                );
            }
            Some(budget)
        } else if took * 4 < interval {
            self.budget
                .and_then(|b| (b.saturating_mul(2) < keys).then(|| b.saturating_mul(2)))
        } else {
            self.budget
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_rounds_ration_reads_and_fast_ones_lift_the_ration() {
        let ms = Duration::from_millis;
        let mut r = ReadRation::default();
        assert!(r.unread([(1, 10), (2, 20)].into_iter()).is_empty());
        r.after_round(ms(60), ms(100), 2_000, 3_000);
        assert_eq!(r.budget, Some(1_000));
        let active = (0..1_200u64).map(|key| (key, key));
        let unread = r.unread(active);
        assert_eq!(unread.len(), 200);
        assert!(unread.iter().all(|&key| key < 200), "the least busy are not read");
        r.after_round(ms(60), ms(100), 100, 3_000);
        assert_eq!(r.budget, Some(MIN_READS));
        r.after_round(ms(30), ms(100), MIN_READS, 3_000);
        assert_eq!(r.budget, Some(MIN_READS), "between a quarter and a half: kept");
        r.after_round(ms(10), ms(100), MIN_READS, 3_000);
        assert_eq!(r.budget, Some(2 * MIN_READS));
        r.after_round(ms(10), ms(100), MIN_READS, 2 * MIN_READS);
        assert_eq!(r.budget, None, "lifted once it covers every key");
    }
}
