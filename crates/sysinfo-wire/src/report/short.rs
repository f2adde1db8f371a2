//! Short text stored inline, as the kernel stores it: trace labels are `[u8; 32]` plus a length, process
//! names at most 16 bytes. Parsing a 16384-entry trace then allocates nothing per entry.

#[allow(unused_imports)]
use crate::prelude::*;
use core::fmt;
use core::ops::Deref;

/// Text of at most `N` bytes kept inline (no allocation); longer text, which the kernel never prints, is
/// kept on the heap. `N` must be below 256. Derefs to `str` and compares with strings.
#[derive(Clone)]
pub struct ShortStr<const N: usize>(Repr<N>);

#[derive(Clone)]
enum Repr<const N: usize> {
    Inline { len: u8, buf: [u8; N] },
    Heap(Box<str>),
}

/// A trace label (the kernel keeps at most 32 bytes).
pub type TraceLabel = ShortStr<32>;
/// A process name (at most 16 bytes in rvOS).
pub type ProcessName = ShortStr<16>;

impl<const N: usize> ShortStr<N> {
    /// Copies `s`.
    #[inline(always)]
    pub fn new(s: &str) -> Self {
        if s.len() <= N && N < 256 {
            // Built element by element (branch-free selects the compiler vectorises) rather than by a
            // variable-length memcpy, whose narrow stores stall the wide loads that move the value next.
            let bytes = s.as_bytes();
            let buf = core::array::from_fn(|i| if i < bytes.len() { bytes[i] } else { 0 });
            ShortStr(Repr::Inline { len: s.len() as u8, buf })
        } else {
            ShortStr(Repr::Heap(s.into()))
        }
    }

    /// Copies `text[start..end]`. Inline text is copied as the `N` bytes from `start` when `text` has them
    /// (with the bytes past `end` cleared): one fixed-size load instead of a copy of variable length.
    #[inline(always)]
    pub(crate) fn new_at(text: &str, start: usize, end: usize) -> Self {
        let s = &text[start..end];
        match text.as_bytes().get(start..start + N) {
            Some(window) if s.len() <= N && N < 256 => {
                let len = s.len();
                let mut buf = [0u8; N];
                buf.copy_from_slice(window);
                if let Ok(wide) = <[u8; 16]>::try_from(&buf[..]) {
                    // One 16-byte register, masked.
                    let keep = u128::MAX.checked_shr(8 * (16 - len as u32)).unwrap_or(0);
                    buf.copy_from_slice(&(u128::from_le_bytes(wide) & keep).to_le_bytes());
                } else {
                    for (i, b) in buf.iter_mut().enumerate() {
                        *b = if i < len { *b } else { 0 };
                    }
                }
                ShortStr(Repr::Inline { len: len as u8, buf })
            }
            _ => ShortStr::new(s),
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were copied from a `str` whole, so they are UTF-8.
            Repr::Inline { len, buf } => core::str::from_utf8(&buf[..usize::from(*len)]).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }
}

impl<const N: usize> Default for ShortStr<N> {
    fn default() -> Self {
        ShortStr::new("")
    }
}

impl<const N: usize> Deref for ShortStr<N> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for ShortStr<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> From<&str> for ShortStr<N> {
    fn from(s: &str) -> Self {
        ShortStr::new(s)
    }
}

impl<const N: usize> From<String> for ShortStr<N> {
    fn from(s: String) -> Self {
        if s.len() <= N {
            ShortStr::new(&s)
        } else {
            ShortStr(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl<const N: usize> fmt::Debug for ShortStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for ShortStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl<const N: usize> PartialEq for ShortStr<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for ShortStr<N> {}

impl<const N: usize> core::hash::Hash for ShortStr<N> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl<const N: usize> PartialEq<str> for ShortStr<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for ShortStr<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(feature = "serde")]
impl<const N: usize> serde::Serialize for ShortStr<N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_behave_the_same() {
        let short = TraceLabel::new("process_list-enter");
        let long = TraceLabel::from("x".repeat(40));
        assert!(matches!(short.0, Repr::Inline { len: 18, .. }));
        assert!(matches!(long.0, Repr::Heap(_)));
        assert_eq!(short, "process_list-enter");
        assert_eq!(long.len(), 40);
        assert_eq!(TraceLabel::new("é").as_str(), "é");
        assert_eq!(format!("{short:?}"), "\"process_list-enter\"");
        assert_eq!(ProcessName::default(), "");
    }

    #[test]
    fn new_at_is_new_of_the_slice() {
        let text = "0123456789abcdef\u{e9}ghijklmnopqrstuvwxyz\u{e9}";
        for start in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            for end in (start..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let s = &text[start..end];
                let (name, label) =
                    (ProcessName::new_at(text, start, end), TraceLabel::new_at(text, start, end));
                assert_eq!(name, s);
                assert_eq!(label, s);
                // Inline exactly when `new` would be, with the same bytes (cleared past the text).
                match (&name.0, &ProcessName::new(s).0) {
                    (Repr::Inline { len, buf }, Repr::Inline { len: l, buf: b }) => {
                        assert_eq!((len, buf), (l, b))
                    }
                    (Repr::Heap(a), Repr::Heap(b)) => assert_eq!(a, b),
                    _ => panic!("{s:?}: inline and heap differ"),
                }
            }
        }
    }
}
