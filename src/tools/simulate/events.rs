//! The simulated clock's queue of events: each at a time, taken earliest first, and among
//! events at the same time in the order they were scheduled, so that a run is the same
//! sequence of events on every machine and every load.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Events of type `E` at simulated times, earliest first (ties in scheduling order).
pub struct Events<E> {
    heap: BinaryHeap<Entry<E>>,
    scheduled: u64,
}

struct Entry<E> {
    time_s: f64,
    order: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, for the max-heap to pop the earliest (then the first scheduled).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time_s
            .total_cmp(&self.time_s)
            .then(other.order.cmp(&self.order))
    }
}

impl<E> Default for Events<E> {
    fn default() -> Self {
        Events {
            heap: BinaryHeap::new(),
            scheduled: 0,
        }
    }
}

impl<E> Events<E> {
    /// Schedules `event` at `time_s`.
    pub fn at(&mut self, time_s: f64, event: E) {
        self.heap.push(Entry {
            time_s,
            order: self.scheduled,
            event,
        });
        self.scheduled += 1;
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(f64, E)> {
        self.heap.pop().map(|e| (e.time_s, e.event))
    }

    /// Events still scheduled.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether none is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_scheduling_order() {
        let mut events = Events::default();
        events.at(2.0, "c");
        events.at(1.0, "a");
        events.at(2.0, "d");
        events.at(1.0, "b");
        let order: Vec<_> = std::iter::from_fn(|| events.pop()).collect();
        assert_eq!(order, [(1.0, "a"), (1.0, "b"), (2.0, "c"), (2.0, "d")]);
        assert!(events.is_empty());
    }
}
