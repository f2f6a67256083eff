//! A run's slots: a small type map in which the rooms above the state room keep what they hang
//! on a run, each under a type of its own, so the run's handle names none of them.
//!
//! Today's tenants: the chats room's upstream response head and resume-token headers
//! (`chats::head`), the replica's mark of a run journaled and the head a mirror read from the
//! journal (`replica`), and the delivery room's protocol-1 snapshot cache (`deliver::snapshot`).
//! A slot is keyed by its value's [`TypeId`], so a room reads back only what it put in, under its
//! own (usually private) type. At most [`MAX_SLOTS`] types are held: the rooms define a handful,
//! and a value past the bound is not kept (a debug build panics, so a test notices).

use std::any::{Any, TypeId};
use std::sync::Arc;

use parking_lot::Mutex;

/// The most slot types one run holds.
pub const MAX_SLOTS: usize = 8;

/// A held slot: the type it is keyed by and its value.
struct Slot {
    key: TypeId,
    value: Arc<dyn Any + Send + Sync>,
}

/// A run's slots (see the module's documentation).
#[derive(Default)]
pub struct Slots(Mutex<Vec<Slot>>);

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slots({} held)", self.0.lock().len())
    }
}

impl Slots {
    /// Puts `value` in the slot of its type, replacing what it held.
    pub fn insert<T: Any + Send + Sync>(&self, value: T) {
        let value: Arc<dyn Any + Send + Sync> = Arc::new(value);
        let mut slots = self.0.lock();
        match slots.iter_mut().find(|s| s.key == TypeId::of::<T>()) {
            Some(slot) => slot.value = value,
            None => Self::push(&mut slots, TypeId::of::<T>(), value),
        }
    }

    /// The value in the slot of type `T`, if one was put there.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = {
            let slots = self.0.lock();
            let slot = slots.iter().find(|s| s.key == TypeId::of::<T>())?;
            slot.value.clone()
        };
        value.downcast::<T>().ok()
    }

    /// Whether the slot of type `T` holds a value.
    pub fn contains<T: Any + Send + Sync>(&self) -> bool {
        self.0.lock().iter().any(|s| s.key == TypeId::of::<T>())
    }

    /// The value in the slot of type `T`, put there first by `make` when the slot is empty
    /// (`make` runs under the slots' lock, so it must not touch them).
    pub fn get_or_insert_with<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut slots = self.0.lock();
        if let Some(slot) = slots.iter().find(|s| s.key == TypeId::of::<T>()) {
            if let Ok(held) = slot.value.clone().downcast::<T>() {
                return held;
            }
        }
        let value = Arc::new(make());
        Self::push(&mut slots, TypeId::of::<T>(), value.clone());
        value
    }

    fn push(slots: &mut Vec<Slot>, key: TypeId, value: Arc<dyn Any + Send + Sync>) {
        debug_assert!(
            slots.len() < MAX_SLOTS,
            "a run holds at most {MAX_SLOTS} slots"
        );
        if slots.len() < MAX_SLOTS {
            slots.push(Slot { key, value });
        } else {
            log::warn!("a run's slots are full ({MAX_SLOTS}): a value was not kept");
        }
    }
}
