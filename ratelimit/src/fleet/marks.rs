//! The fleet's marks of hot keys as this instance has read them: each
//! epoch's list in the store, appended to by the instances that turned a
//! key hot and read by every instance from where it left off. What the
//! sync loop's history consults (is this key hot in the fleet?) and what
//! [`hot`](super::hot) acts on.

use super::ids::IdMap;
use super::store::{Counter, OpResult, SyncOp};

/// The route of the fleet's list of hot keys (fleet id 0 like the roster's,
/// route 0).
pub(crate) const HOT_LIST_ROUTE: u32 = 1;

/// The list of keys marked hot in `epoch`.
pub(crate) fn hot_list(epoch: u64) -> Counter {
    Counter {
        route: HOT_LIST_ROUTE,
        key: 0,
        epoch,
    }
}

/// The fleet's hot keys as this instance has read them: a key any instance
/// marked hot (it reached its share there) in this epoch or the one before
/// is pushed and read by every instance that serves it. Each epoch's marks
/// are a list in the store, appended to (`RPUSH`) and read from where this
/// instance left off (`LRANGE`): a round reads only the marks that are new.
#[derive(Debug, Default)]
pub(super) struct HotKeys {
    /// Fleet ids marked hot, with the newest epoch they were marked in.
    seen: IdMap<u64>,
    /// How far this instance has read the lists of these epochs.
    read: std::collections::HashMap<u64, u64>,
    /// The epoch of the last round (entries older than its predecessor go).
    epoch: u64,
}

/// A round's hot-list operations.
#[derive(Debug)]
pub(super) struct HotOps {
    append: Option<(usize, Vec<u64>)>,
    reads: [Option<(usize, u64)>; 2],
}

impl HotKeys {
    /// Whether the fleet marked `key` hot in `epoch` or the one before.
    pub(super) fn is_hot(&self, key: u64, epoch: u64) -> bool {
        self.seen.get(&key).is_some_and(|&e| e + 1 >= epoch)
    }

    /// Appends the round's hot-list operations to `ops`: `mark` (keys this
    /// instance holds hot and has not marked in `epoch`) appended to this
    /// epoch's list, and both lists of the window read from where this
    /// instance left off.
    pub(super) fn ops(&mut self, ops: &mut Vec<SyncOp>, epoch: u64, mark: Vec<u64>) -> HotOps {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.seen.retain(|_, e| *e + 1 >= epoch);
            self.read.retain(|e, _| *e + 1 >= epoch);
        }
        let append = (!mark.is_empty()).then(|| {
            ops.push(SyncOp::Append {
                counter: hot_list(epoch),
                ids: mark.clone(),
                expire: true,
            });
            (ops.len() - 1, mark)
        });
        let mut reads = [None; 2];
        for (read, e) in reads.iter_mut().zip([epoch.saturating_sub(1), epoch]) {
            ops.push(SyncOp::ReadList {
                counter: hot_list(e),
                from: self.read.get(&e).copied().unwrap_or(0),
            });
            *read = Some((ops.len() - 1, e));
        }
        HotOps { append, reads }
    }

    /// After the round: records the marks read, and returns them (each
    /// may come with units pushed into slices that readers of the key no
    /// longer read) and the keys whose mark this round appended (none when
    /// the append failed: marked again next round).
    pub(super) fn after(&mut self, hot: HotOps, results: &[OpResult]) -> (Vec<u64>, Vec<u64>) {
        let mut new = Vec::new();
        for (i, e) in hot.reads.into_iter().flatten() {
            if let Some(OpResult::Read(ids)) = results.get(i) {
                *self.read.entry(e).or_insert(0) += ids.len() as u64;
                for &id in ids {
                    let newest = self.seen.entry(id).or_insert(e);
                    *newest = (*newest).max(e);
                    new.push(id);
                }
            }
        }
        let appended = match hot.append {
            Some((i, ids)) if matches!(results.get(i), Some(OpResult::Added(Some(_)))) => ids,
            _ => Vec::new(),
        };
        (new, appended)
    }
}
