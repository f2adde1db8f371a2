//! The sans-IO codec: [`StreamDecoder`] turns bytes in any chunking into [`Update`](crate::Update)s,
//! [`StreamEncoder`] turns [`Sample`](crate::Sample)s into bytes. No sockets, no clocks: the tokio adapter
//! ([`SmonCodec`](crate::SmonCodec), feature `codec`) and the async reader ([`UpdateReader`](crate::UpdateReader),
//! feature `client`) are thin layers over these two.

mod decoder;
mod encoder;

pub use decoder::{DecoderConfig, StreamDecoder, SyncState, TokenInfo, UpdateRef, ValueRef};
pub use encoder::{EncoderConfig, StreamEncoder};
