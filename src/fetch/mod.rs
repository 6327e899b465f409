//! Fetch serving and snapshot streaming off the raft shard.
//!
//! The raft shard owns the Raft core and the log's write path. After every change it
//! *publishes* what a Fetch answer depends on (`Publication`): the core's facts (epoch,
//! leadership, high watermark, leader endpoints), its picture of the log (`LogView`: start,
//! end, epochs, snapshots), the voters, and the batches appended since the last publication as
//! shared `Bytes`. Fetch shards keep the latest publication (`FetchView`) and a batch cache,
//! answer every Fetch with the same rules the core uses (`raft::serve`), park long-polls
//! themselves, and read older batches from the segment files on their own core. Only the
//! replica's progress (`serve::Progress`) goes back to the raft shard. A fetch shard on
//! another thread is woken for a publication only while something there waits for one
//! (`mailbox`); otherwise it applies what was posted when it next answers.
//!
//! # Why a lagging fetch shard is safe
//!
//! A fetch shard's facts may be behind the core's. An answer built from older facts is an
//! answer the leader could have sent a moment earlier, delivered late — which Raft already
//! tolerates from any network — *provided its bytes are the bytes that leader had*. Within
//! one leader epoch the log only grows, so bytes a publication describes stay valid while that
//! epoch lasts. They change only when the raft shard rewrites offsets: a truncation (it
//! follows a new leader whose log diverges) or a snapshot install. So:
//!
//! 1. the raft shard bumps a shared counter (`Generation`) *before* it executes any such
//!    rewrite, and every publication carries the counter's value;
//! 2. a fetch shard reads the bytes for an answer, then compares the counter with its view's
//!    value; if they differ the bytes may come from the rewritten log, and the answer is
//!    dropped and rebuilt once the newer publication has arrived (a seqlock).
//!
//! The bytes that pass the check were read before the rewrite began, so they are the old
//! epoch's bytes, consistent with the old epoch's facts. Progress a fetch shard validated in
//! epoch E counts in the core only while it still leads E (`Raft::handle_fetch_progress`),
//! and a leader never truncates in its own epoch. The simulator runs fetch shards with lagging
//! publications against the same invariants, plus one of their own (what a fetch shard serves
//! as leader of E is what that leader had), and its `stale_fetch_view` mutation — answering
//! without the check — is caught.

pub mod mailbox;
pub mod pacing;
pub mod publication;
pub mod reader;
pub mod shard;
pub mod view;

pub use publication::{CachedBatch, Generation, Publication, ReaderReset, SegmentSnapshot};
pub use view::{FetchView, Parking, Ticket};
