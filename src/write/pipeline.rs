//! Sending many requests on one connection before reading any answer: a
//! fixed list of them ([`Calls`]), or requests sent as they are made
//! ([`Flight`], for bodies written as they arrive).

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;

use futures_util::stream::FuturesOrdered;
use futures_util::StreamExt;

/// One request to the database, not yet sent.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Requests whose answers are read in order, sent either all at once
/// (pipelined) or one at a time.
pub struct Calls<'a, T> {
    calls: std::vec::IntoIter<Call<'a, T>>,
    /// Answers that arrived while sending (only errors do, e.g. a closed connection).
    early: Vec<Option<T>>,
    next: usize,
    /// Everything was sent at once: the answers cost one round trip in all.
    sent: bool,
}

impl<'a, T> Calls<'a, T> {
    /// Wrap requests; nothing is sent until [`Calls::send_all`] or [`Calls::next`].
    pub fn new(calls: Vec<Call<'a, T>>) -> Self {
        let early = (0..calls.len()).map(|_| None).collect();
        Calls {
            calls: calls.into_iter(),
            early,
            next: 0,
            sent: false,
        }
    }

    /// Send every request now, in order, without waiting for any answer.
    ///
    /// tokio-postgres sends a request when its future is first polled, so
    /// polling each once, in order, fixes the order on the wire (BEGIN
    /// first, COMMIT last) rather than leaving it to a scheduler.
    pub async fn send_all(&mut self) {
        self.sent = true;
        let calls = self.calls.as_mut_slice();
        let early = &mut self.early[self.next..];
        poll_fn(|cx| {
            for (call, slot) in calls.iter_mut().zip(early.iter_mut()) {
                if slot.is_none() {
                    if let Poll::Ready(answer) = call.as_mut().poll(cx) {
                        *slot = Some(answer);
                    }
                }
            }
            Poll::Ready(())
        })
        .await;
        // A flight costs a round trip unless every answer was at hand
        // (statements already prepared on the connection).
        if self.early[self.next..].iter().any(Option::is_none) {
            crate::db::round_trips::round_trip();
        }
    }

    /// Whether the last request was answered while sending: refused by a
    /// connection already closed, so it never went out.
    pub fn last_refused_at_send(&self) -> bool {
        self.early.last().is_some_and(Option::is_some)
    }

    /// The answer to the next request (sending it first if it was not sent yet).
    pub async fn next(&mut self) -> Option<T> {
        let call = self.calls.next()?;
        let early = self.early[self.next].take();
        self.next += 1;
        Some(match early {
            Some(answer) => answer,
            None => {
                if !self.sent {
                    // Not sent with the others (pipelining off): its own round trip.
                    crate::db::round_trips::round_trip();
                }
                call.await
            }
        })
    }
}

/// Requests sent on one connection as they are made, their answers read
/// back in order.
pub struct Flight<'a, T> {
    pending: FuturesOrdered<Call<'a, T>>,
    /// Answers that arrived while sending.
    ready: VecDeque<T>,
}

impl<T> Default for Flight<'_, T> {
    /// Nothing sent yet.
    fn default() -> Self {
        Flight {
            pending: FuturesOrdered::new(),
            ready: VecDeque::new(),
        }
    }
}

impl<'a, T> Flight<'a, T> {
    /// Send `call` now (tokio-postgres sends a request when first polled).
    pub async fn send(&mut self, call: Call<'a, T>) {
        // A request sent while every earlier one has been answered waits a
        // round trip of its own.
        if self.pending.is_empty() {
            crate::db::round_trips::round_trip();
        }
        self.pending.push_back(call);
        let (pending, ready) = (&mut self.pending, &mut self.ready);
        poll_fn(|cx| {
            while let Poll::Ready(Some(answer)) = pending.poll_next_unpin(cx) {
                ready.push_back(answer);
            }
            Poll::Ready(())
        })
        .await;
    }

    /// The next answer in order, waiting for it.
    pub async fn next(&mut self) -> Option<T> {
        match self.ready.pop_front() {
            Some(answer) => Some(answer),
            None => self.pending.next().await,
        }
    }

    /// The next answer in order if it has arrived.
    pub fn arrived(&mut self) -> Option<T> {
        self.ready.pop_front()
    }
}
