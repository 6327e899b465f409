//! `KeepDmaBlocks`, the `ringraft` binary's global allocator: the system allocator, except that
//! large page-aligned blocks are kept when freed and handed out again.
//!
//! Those blocks are glommio's DMA buffers that do not fit its registered arena
//! (`io_memory_kib`): every catch-up and snapshot read of up to 8 MiB. Each one was a fresh
//! `mmap` (the malloc threshold is pinned, `sys::pin_malloc_mmap_threshold`), so the O_DIRECT
//! read that filled it first faulted in and zeroed its 2,048 pages. That halved the read: 8 MiB
//! `preadv` O_DIRECT reads of one file ran at 1,335 MB/s into one reused buffer and 660 MB/s
//! into a fresh `mmap` each time (this machine, Python, same run), and the fetch shard's 8 MiB
//! read-aheads took 10 ms each where the reused-buffer read takes 6.
//!
//! At most `KEEP_BYTES` of freed blocks are kept, in `SLOTS` slots, matched by size rounded up
//! to a MiB: the memory of a node that streamed once stays resident, bounded, and every other
//! allocation is untouched (other blocks are rarely 4 KiB-aligned, and none of them this large).
//! A library cannot choose the allocator of the program that embeds it; an embedding
//! application that streams catch-ups or snapshots may declare this one too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

/// Blocks this aligned and at least `MIN_BYTES` large are kept.
const ALIGN: usize = 4096;
/// Kept blocks are allocated on a huge page's boundary (more than their callers ask), so
/// that huge pages back the whole block, not only the 2 MiB spans that happen to lie inside
/// it.
const HUGE_PAGE: usize = 2 << 20;
const MIN_BYTES: usize = 1 << 20;
/// Kept blocks are matched by size rounded up to this.
const CLASS_BYTES: usize = 1 << 20;
/// At most this much freed memory is kept: five blocks of an 8 MiB read (a page more when it
/// starts off a page, so 9 MiB as kept). Enough for the snapshot shard's three chunks (two
/// read ahead, one being sent; `fetch::shard`) or a catch-up reader's three windows (two read
/// ahead, one being sent; `fetch::reader`), not for all six streaming at once.
const KEEP_BYTES: usize = 48 << 20;
const SLOTS: usize = 8;

pub struct KeepDmaBlocks;

/// Freed blocks: (address, rounded size); size 0 is an empty slot.
struct Kept {
    blocks: [(usize, usize); SLOTS],
    bytes: usize,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    blocks: [(0, 0); SLOTS],
    bytes: 0,
});

/// The rounded size of a block this allocator keeps, or `None` for one it passes through.
fn kept_size(layout: Layout) -> Option<usize> {
    (layout.align() == ALIGN && layout.size() >= MIN_BYTES)
        .then(|| layout.size().div_ceil(CLASS_BYTES) * CLASS_BYTES)
}

fn take(size: usize) -> Option<*mut u8> {
    let mut kept = KEPT.lock().ok()?;
    let slot = kept.blocks.iter().position(|(_, s)| *s == size)?;
    let (address, _) = std::mem::take(&mut kept.blocks[slot]);
    kept.bytes -= size;
    Some(address as *mut u8)
}

/// Keeps a freed block; false when there is no room (the caller frees it).
fn keep(ptr: *mut u8, size: usize) -> bool {
    let Ok(mut kept) = KEPT.lock() else {
        return false;
    };
    if kept.bytes + size > KEEP_BYTES {
        return false;
    }
    let Some(slot) = kept.blocks.iter().position(|(_, s)| *s == 0) else {
        return false;
    };
    kept.blocks[slot] = (ptr as usize, size);
    kept.bytes += size;
    true
}

/// A new block of a kept size, backed by huge pages where the kernel has them: each O_DIRECT
/// read into it pins a few 2 MiB pages instead of 2,048 small ones. That took catch-up and
/// snapshot streaming from 1.6-1.9 GB/s to 2.4-2.7 GB/s here.
///
/// The block starts on a huge page's boundary. A block that started anywhere else kept small
/// pages before its first boundary and after its last, and the disk's queue takes at most 254
/// pages per request: an 8 MiB read went to the disk as five requests (1 MiB of small pages,
/// 8 KiB, 4 MiB, 3 MiB, 12 KiB) instead of two of 4 MiB, and this disk serves one request at
/// a time, each with its own fixed cost.
unsafe fn fresh(size: usize, zeroed: bool) -> *mut u8 {
    let layout = huge_layout(size);
    let ptr = if zeroed {
        System.alloc_zeroed(layout)
    } else {
        System.alloc(layout)
    };
    if !ptr.is_null() {
        // Refused (no transparent huge pages), the block works the same.
        let _ = crate::sys::advise_huge_pages(ptr as usize, size);
    }
    ptr
}

/// The layout a kept block of `size` (a whole number of `CLASS_BYTES`, so a valid layout) is
/// allocated and freed with.
unsafe fn huge_layout(size: usize) -> Layout {
    Layout::from_size_align_unchecked(size, HUGE_PAGE)
}

// SAFETY: every block comes from `System` with the layout it is freed with: a kept block was
// allocated with its rounded size and `HUGE_PAGE` (`huge_layout`), and is freed (or handed
// out again) with them; its callers asked for `ALIGN`, which `HUGE_PAGE` satisfies.
unsafe impl GlobalAlloc for KeepDmaBlocks {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(size) = kept_size(layout) else {
            return System.alloc(layout);
        };
        take(size).unwrap_or_else(|| fresh(size, false))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(size) = kept_size(layout) else {
            return System.alloc_zeroed(layout);
        };
        match take(size) {
            Some(ptr) => {
                ptr.write_bytes(0, layout.size());
                ptr
            }
            None => fresh(size, true),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match kept_size(layout) {
            None => System.dealloc(ptr, layout),
            Some(size) => {
                if !keep(ptr, size) {
                    System.dealloc(ptr, huge_layout(size));
                }
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        if kept_size(layout).is_none() && kept_size(new_layout).is_none() {
            return System.realloc(ptr, layout, new_size);
        }
        let new = self.alloc(new_layout);
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_aligned_blocks_are_reused_up_to_the_bound_and_others_pass_through() {
        let a = KeepDmaBlocks;
        let big = Layout::from_size_align(8 << 20, ALIGN).unwrap();
        // A size no other test in this process uses, so the slot found is this test's own.
        let odd = Layout::from_size_align((13 << 20) - 5, ALIGN).unwrap();
        unsafe {
            let p = a.alloc(odd);
            assert!(
                !p.is_null() && p as usize % HUGE_PAGE == 0,
                "on a huge page's boundary"
            );
            p.write_bytes(7, odd.size());
            a.dealloc(p, odd);
            let q = a.alloc(Layout::from_size_align(13 << 20, ALIGN).unwrap());
            assert_eq!(p, q, "a block of the same rounded size is handed out again");
            let zeroed = Layout::from_size_align(13 << 20, ALIGN).unwrap();
            a.dealloc(q, zeroed);
            let z = a.alloc_zeroed(zeroed);
            assert_eq!(z, p);
            assert!(std::slice::from_raw_parts(z, zeroed.size())
                .iter()
                .all(|b| *b == 0));
            // Grown past its class, it moves and keeps its bytes.
            z.write_bytes(9, 100);
            let grown = a.realloc(z, zeroed, 15 << 20);
            assert!(std::slice::from_raw_parts(grown, 100)
                .iter()
                .all(|b| *b == 9));
            a.dealloc(grown, Layout::from_size_align(15 << 20, ALIGN).unwrap());
            // Small or unaligned blocks are the system's.
            let small = Layout::from_size_align(4096, ALIGN).unwrap();
            let s = a.alloc(small);
            assert!(!s.is_null());
            a.dealloc(s, small);
            let v = a.alloc(big);
            a.dealloc(v, big);
        }
        // No more than the bound is kept.
        let layout = Layout::from_size_align(20 << 20, ALIGN).unwrap();
        unsafe {
            let blocks: Vec<*mut u8> = (0..4).map(|_| a.alloc(layout)).collect();
            for b in blocks {
                a.dealloc(b, layout);
            }
        }
        assert!(KEPT.lock().unwrap().bytes <= KEEP_BYTES);
    }
}
