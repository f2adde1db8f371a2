//! Directory globs (`[[meter161]] dir_glob = "/home/*/os161/root"`): the directories a pattern matches, found
//! a component at a time (names that are not UTF-8 too), and the target name of each match.

use std::path::{Path, PathBuf};

/// The most directories one `dir_glob` watches.
pub const MAX_GLOB_TARGETS: usize = 10_000;

/// Writes the bytes of a path (or of one component) as text, losslessly: UTF-8 is kept, a
/// backslash becomes `\\` and every byte that is not part of valid UTF-8 becomes `\xHH` (two
/// lowercase hex digits). Two different byte strings never give the same text.
pub fn escape_path_bytes(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// [`escape_path_bytes`] of an OS string.
pub fn escape_os(s: &std::ffi::OsStr) -> String {
    escape_path_bytes(s.as_encoded_bytes())
}

fn has_wildcard(component: &std::ffi::OsStr) -> bool {
    component.as_encoded_bytes().iter().any(|b| matches!(b, b'*' | b'?' | b'['))
}

/// The target name of a `dir_glob` match: `BLOCK/PART/...`, the parts being the directory's path
/// components that the pattern's wildcard components (those with `*`, `?` or `[`) matched, in
/// order, each escaped by [`escape_path_bytes`]; a `**` contributes every component it matched.
/// `/home/*/os161/root` names `/home/alice/os161/root` `BLOCK/alice`. A pattern without wildcards
/// names its one match `BLOCK`. Different directories matched by one pattern get different names.
pub fn glob_target_name(block: &str, pattern: &str, dir: &Path) -> String {
    let pat: Vec<_> = Path::new(pattern).components().map(|c| c.as_os_str().to_owned()).collect();
    let got: Vec<_> = dir.components().map(|c| c.as_os_str().to_owned()).collect();
    let mut parts: Vec<String> = Vec::new();
    match pat.iter().position(|c| c.as_encoded_bytes() == b"**") {
        Some(deep) if got.len() + 1 >= pat.len() => {
            let tail = pat.len() - deep - 1;
            let (head_pat, tail_pat) = (&pat[..deep], &pat[deep + 1..]);
            let (head_got, rest) = got.split_at(deep);
            let (middle, tail_got) = rest.split_at(rest.len() - tail);
            parts.extend(
                head_pat.iter().zip(head_got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)),
            );
            parts.extend(middle.iter().map(|g| escape_os(g)));
            parts.extend(
                tail_pat.iter().zip(tail_got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)),
            );
        }
        None if got.len() == pat.len() => {
            parts.extend(pat.iter().zip(&got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)));
        }
        // The glob crate never yields such a path; keep the name unique anyway.
        _ => parts.push(escape_os(dir.as_os_str()).trim_start_matches('/').to_owned()),
    }
    let mut name = block.to_owned();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        name.push('/');
        name.push_str(part);
    }
    name
}

/// One component of a `dir_glob` pattern.
enum Step {
    Literal(std::ffi::OsString),
    Wild(glob::Pattern),
    Deep,
}

/// How deep a `**` descends.
const MAX_GLOB_DEPTH: usize = 32;

/// The first `max` directories (in name order) that match `pattern` and pass `keep`, walked a
/// component at a time. Unlike `glob::glob`, which skips names that are not UTF-8, a name is
/// matched through its lossy form (an invalid byte is one `?`), so such directories are found too.
pub fn glob_dirs(
    pattern: &str,
    max: usize,
    keep: &dyn Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, glob::PatternError> {
    use std::path::Component;
    let mut base = PathBuf::new();
    let mut steps = Vec::new();
    for c in Path::new(pattern).components() {
        match c {
            Component::Normal(os) if os.as_encoded_bytes() == b"**" => steps.push(Step::Deep),
            Component::Normal(os) if has_wildcard(os) => {
                steps.push(Step::Wild(glob::Pattern::new(&os.to_string_lossy())?))
            }
            c if steps.is_empty() => base.push(c.as_os_str()),
            c => steps.push(Step::Literal(c.as_os_str().to_owned())),
        }
    }
    let mut out = Vec::new();
    walk(&Walk { max, keep }, &base, &steps, 0, &mut out);
    Ok(out)
}

struct Walk<'a> {
    max: usize,
    keep: &'a dyn Fn(&Path) -> bool,
}

fn walk(w: &Walk<'_>, base: &Path, steps: &[Step], depth: usize, out: &mut Vec<PathBuf>) {
    if out.len() >= w.max {
        return;
    }
    let Some((step, rest)) = steps.split_first() else {
        if base.is_dir() && (w.keep)(base) {
            out.push(base.to_owned());
        }
        return;
    };
    let children = || {
        let dir = if base.as_os_str().is_empty() { Path::new(".") } else { base };
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir())))
            .collect();
        names.sort();
        names
    };
    match step {
        Step::Literal(c) => walk(w, &base.join(c), rest, depth, out),
        Step::Wild(p) => {
            for (name, _) in children() {
                if p.matches(&name.to_string_lossy()) {
                    walk(w, &base.join(name), rest, depth, out);
                }
            }
        }
        Step::Deep => {
            walk(w, base, rest, depth, out);
            if depth < MAX_GLOB_DEPTH {
                // Real directories only: a symlink loop is not followed.
                for (name, _) in children().into_iter().filter(|(_, is_dir)| *is_dir) {
                    walk(w, &base.join(name), steps, depth + 1, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_glob_match_is_named_by_what_its_wildcards_matched() {
        let name = |pattern: &str, dir: &str| glob_target_name("class", pattern, Path::new(dir));
        assert_eq!(name("/home/*/os161/root", "/home/alice/os161/root"), "class/alice");
        assert_eq!(name("/home/*/os161/*/root", "/home/alice/os161/a1/root"), "class/alice/a1");
        assert_eq!(name("/home/user-?/root", "/home/user-b/root"), "class/user-b");
        assert_eq!(name("/srv/**/root", "/srv/a/b/root"), "class/a/b");
        assert_eq!(name("/srv/x/root", "/srv/x/root"), "class");
        assert_eq!(name("rel/*", "rel/a"), "class/a");
    }

    #[test]
    fn the_walk_finds_what_glob_finds_and_non_utf8_names_too() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path();
        for d in [&b"ann/os161/root"[..], b"bob/os161/root", b"x\xff/os161/root", b"cy/other", b"d/e/f/root"]
        {
            std::fs::create_dir_all(root.join(OsStr::from_bytes(d))).unwrap();
        }
        let all = |p: &Path| p.exists();
        let pattern = format!("{}/*/os161/root", root.display());
        let found = glob_dirs(&pattern, 100, &all).unwrap();
        let names: Vec<String> = found.iter().map(|d| glob_target_name("c", &pattern, d)).collect();
        assert_eq!(names, ["c/ann", "c/bob", "c/x\\xff"]);
        let from_glob: Vec<PathBuf> = glob::glob(&pattern).unwrap().filter_map(Result::ok).collect();
        assert_eq!(from_glob, found[..2], "the same as the glob crate where it sees the names");
        assert_eq!(glob_dirs(&pattern, 1, &all).unwrap().len(), 1, "bounded");
        let deep = format!("{}/**/root", root.display());
        let found = glob_dirs(&deep, 100, &all).unwrap();
        let names: Vec<String> = found.iter().map(|d| glob_target_name("c", &deep, d)).collect();
        assert_eq!(names, ["c/ann/os161", "c/bob/os161", "c/d/e/f", "c/x\\xff/os161"]);
    }

    #[test]
    fn non_utf8_directories_get_distinct_lossless_names() {
        let a = Path::new(OsStr::from_bytes(b"/home/x\xff/root"));
        let b = Path::new(OsStr::from_bytes(b"/home/x\xfe/root"));
        assert_eq!(a.display().to_string(), b.display().to_string(), "display() is lossy");
        let (na, nb) = (glob_target_name("c", "/home/*/root", a), glob_target_name("c", "/home/*/root", b));
        assert_eq!((na.as_str(), nb.as_str()), ("c/x\\xff", "c/x\\xfe"));
        // A directory literally named `x\xff` is not confused with the byte 0xff.
        let literal = Path::new("/home/x\\xff/root");
        assert_eq!(glob_target_name("c", "/home/*/root", literal), "c/x\\\\xff");
        assert_eq!(escape_path_bytes("é\\".as_bytes()), "é\\\\");
    }

    /// The inverse of [`escape_path_bytes`]: if it exists, the escaping is lossless.
    fn unescape(s: &str) -> Vec<u8> {
        let (mut out, b) = (Vec::new(), s.as_bytes());
        let mut i = 0;
        while i < b.len() {
            match (b[i], b.get(i + 1)) {
                (b'\\', Some(b'\\')) => (out.push(b'\\'), i += 2).1,
                (b'\\', Some(b'x')) => {
                    out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
                    i += 4;
                }
                (c, _) => (out.push(c), i += 1).1,
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn path_escaping_is_lossless(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(unescape(&escape_path_bytes(&bytes)), bytes);
        }
    }
}
