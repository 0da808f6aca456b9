//! Slots of shared objects, in chunks: what a snapshot shares with the cache it came from
//! and the session working on it.
//!
//! A flat `Arc<Vec<Option<Arc<T>>>>` made the first change after every snapshot copy the
//! whole vector (a reference count bumped per slot: 5,000 scattered cache lines on a
//! 5,000-node cluster) and the last owner's drop release it again; on an idle cluster that
//! was a third of the scheduler's CPU between a pod's arrival and its gang's binds. Here a
//! change copies the chunk list (one pointer per `CHUNK` slots) and the one chunk it
//! touches, and two versions tell which chunks differ by pointer.

use std::sync::Arc;

/// Slots per chunk.
const CHUNK: usize = 64;

type Chunk<T> = Arc<Vec<Option<Arc<T>>>>;

/// See the module documentation. Cloning is O(1).
pub struct Slots<T> {
    chunks: Arc<Vec<Chunk<T>>>,
    len: usize,
}

impl<T> Clone for Slots<T> {
    fn clone(&self) -> Self {
        Slots {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            chunks: Arc::default(),
            len: 0,
        }
    }
}

impl<T> Slots<T> {
    /// How many slots (live or empty).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The object in slot `i`, if the slot exists and is live.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&Arc<T>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)?.as_ref()
    }

    /// Live slots in order, with their index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Arc<T>)> + Clone {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .filter_map(move |(i, s)| s.as_ref().map(|s| (c * CHUNK + i, s)))
        })
    }

    /// Slot `i` to change: its chunk is copied first if another version shares it.
    pub fn slot_mut(&mut self, i: usize) -> &mut Option<Arc<T>> {
        let chunk = &mut Arc::make_mut(&mut self.chunks)[i / CHUNK];
        &mut Arc::make_mut(chunk)[i % CHUNK]
    }

    /// Adds a slot at the end; its index.
    pub fn push(&mut self, value: Option<Arc<T>>) -> usize {
        let i = self.len;
        let chunks = Arc::make_mut(&mut self.chunks);
        if i.is_multiple_of(CHUNK) {
            chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        let last = chunks.last_mut().expect("a chunk with room");
        Arc::make_mut(last).push(value);
        self.len += 1;
        i
    }

    /// Whether both are the same version (nothing changed between them).
    pub fn same(&self, other: &Slots<T>) -> bool {
        Arc::ptr_eq(&self.chunks, &other.chunks)
    }

    /// The slots that may differ between two versions: those of chunks not shared (and any
    /// one has beyond the other's end). Unchanged chunks cost a pointer comparison.
    pub fn maybe_changed<'a>(&'a self, other: &'a Slots<T>) -> impl Iterator<Item = usize> + 'a {
        let both = self.chunks.len().min(other.chunks.len());
        let differing = (0..both).filter(move |&c| !Arc::ptr_eq(&self.chunks[c], &other.chunks[c]));
        let tail = both..self.chunks.len().max(other.chunks.len());
        let len = self.len.max(other.len);
        differing
            .chain(tail)
            .flat_map(move |c| c * CHUNK..((c + 1) * CHUNK).min(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: usize) -> Slots<usize> {
        let mut s = Slots::default();
        for i in 0..n {
            assert_eq!(s.push(Some(Arc::new(i))), i);
        }
        s
    }

    #[test]
    fn slots_read_back_what_was_put_across_chunks() {
        let mut s = filled(3 * CHUNK + 5);
        assert_eq!(s.len(), 3 * CHUNK + 5);
        assert_eq!(s.get(CHUNK).map(|v| **v), Some(CHUNK));
        assert_eq!(s.get(3 * CHUNK + 5), None, "past the end");
        *s.slot_mut(7) = None;
        assert_eq!(s.get(7), None, "an emptied slot");
        let live: Vec<usize> = s
            .iter()
            .map(|(i, v)| {
                assert_eq!(i, **v);
                i
            })
            .collect();
        assert_eq!(live.len(), 3 * CHUNK + 4);
        assert!(!live.contains(&7));
    }

    #[test]
    fn a_change_copies_one_chunk_and_versions_tell_which_changed() {
        let before = filled(4 * CHUNK);
        let mut after = before.clone();
        assert!(after.same(&before));
        assert_eq!(after.maybe_changed(&before).count(), 0);
        *after.slot_mut(2 * CHUNK + 3) = Some(Arc::new(0));
        assert_eq!(
            *before.get(2 * CHUNK + 3).unwrap().as_ref(),
            2 * CHUNK + 3,
            "the old version kept"
        );
        assert!(!after.same(&before));
        // Every other slot still shares its object, and only the changed chunk is listed.
        assert!(Arc::ptr_eq(after.get(5).unwrap(), before.get(5).unwrap()));
        let changed: Vec<usize> = after.maybe_changed(&before).collect();
        assert_eq!(changed, (2 * CHUNK..3 * CHUNK).collect::<Vec<_>>());
        // A slot added: the new tail is listed, whichever side is longer.
        after.push(Some(Arc::new(9)));
        let tail: Vec<usize> = before
            .maybe_changed(&after)
            .filter(|&i| i >= 4 * CHUNK)
            .collect();
        assert_eq!(tail, vec![4 * CHUNK]);
    }
}
