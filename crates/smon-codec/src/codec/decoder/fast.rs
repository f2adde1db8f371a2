//! The hand-tuned paths for the commonest items: a direct token delta followed by a direct value delta of a `u`
//! token (two bytes, no FF, no index op), nearly every pair of a live stream.
//!
//! Reference: `StreamDecoder::step` through `parse_item`, which decodes these pairs too. `fast_pair` and
//! `fast_run` must give the same updates and the same decoder state for every input they accept, and decline
//! (leaving everything untouched) for the rest; the property tests decode every stream through the owned, the
//! borrowing and the callback drivers at every chunking and compare. They buy `decode_with` its 4.3x `tsz`
//! (and `decode_ref` 2.0x), against 0.46x for the owned path that allocates per update (criterion,
//! `benches/codec.rs`).
//!
//! `--cfg telemon_portable` turns them off ([`ENABLED`]): every item goes through `parse_item`; CI runs the
//! tests once that way.

use bytes::{Buf, BytesMut};

use super::{Event, Last, StreamDecoder, UpdateRef, ValueRef};
use crate::wire;

/// Whether the hand-tuned paths are on (off in the portable build, which tests the reference alone).
pub(super) const ENABLED: bool = !cfg!(telemon_portable);

impl StreamDecoder {
    /// The fast path for the commonest pair: a direct token delta and a direct value delta of a `u`
    /// token (two bytes, no FF, no index op). Anything else goes the general way.
    #[inline]
    pub(super) fn fast_pair(&mut self, buf: &mut BytesMut) -> Option<Event> {
        let &[t, v] = buf.first_chunk::<2>()?;
        if t > wire::DIRECT_MAX || v > wire::DIRECT_MAX {
            return None;
        }
        let token = self.current.checked_add(u64::from(t))?;
        let tok = self.tokens.get_mut(token)?;
        let Last::Unsigned(last) = &mut tok.last else { return None };
        *last = last.checked_add(u64::from(v))?;
        self.current = token;
        buf.advance(2);
        self.consumed += 2;
        self.ff_run = 0;
        Some(Event::Value(token))
    }

    /// Decodes consecutive plain pairs (direct token delta, direct delta of a `u` token) in one go.
    pub(super) fn fast_run(&mut self, buf: &mut BytesMut, f: &mut impl FnMut(UpdateRef<'_>)) -> usize {
        let bytes: &[u8] = buf;
        let mut pos = 0;
        let mut current = self.current;
        while let Some(&[t, v]) = bytes.get(pos..pos + 2).and_then(|p| p.first_chunk::<2>()) {
            if t > wire::DIRECT_MAX || v > wire::DIRECT_MAX {
                break;
            }
            let Some(token) = current.checked_add(u64::from(t)) else { break };
            let Some(tok) = self.tokens.get_mut(token) else { break };
            let Last::Unsigned(last) = &mut tok.last else { break };
            let Some(new) = last.checked_add(u64::from(v)) else { break };
            *last = new;
            current = token;
            pos += 2;
            let index: &[u64] = match tok.bound() {
                None => &self.ix,
                Some(b) => {
                    self.scratch.clear();
                    self.scratch.push(b);
                    self.scratch.extend(self.ix.iter().skip(1));
                    &self.scratch
                }
            };
            f(UpdateRef::Value { token, name: &tok.name, index, value: ValueRef::Unsigned(new) });
        }
        if pos > 0 {
            self.current = current;
            self.ff_run = 0;
            self.advance(buf, pos);
        }
        pos / 2
    }
}
