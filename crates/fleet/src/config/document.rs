//! The config file as sections of blocks, each read by the layer that owns it.
//!
//! telemon's config is one TOML file, but no layer reads all of it: the fleet reads its protocols'
//! target blocks (`[[hmon]]`, ...) and `[[file_sd]]`, the push senders read `[[remote_write]]` and
//! `[[otlp]]`, and the binary reads `[serve]`. A [`Document`] is the file parsed once for its syntax;
//! [`Document::read_section`] gives one section's blocks, each with the exact place of every key it holds, so
//! that whatever a layer finds wrong, while reading or checking later, is `FILE:LINE: KEY: why`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub use super::parse::ConfigError;
use super::parse::{line_of, LineIndex};

/// A config file's text, parsed once for its syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    file: Arc<str>,
    text: Arc<str>,
}

impl Document {
    /// Parses `text` (named `file` in errors); a syntax error is at its line.
    pub fn parse(file: &str, text: &str) -> Result<Document, ConfigError> {
        let doc = Document { file: Arc::from(file), text: Arc::from(text) };
        DeTable::parse(text).map_err(|e| doc.toml_error(&e, None))?;
        Ok(doc)
    }

    /// Reads the file at `path`; a file that cannot be read is an error of the whole file.
    pub fn load(path: &std::path::Path) -> Result<Document, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: 0,
            key: String::new(),
            message: format!("cannot read the config file: {e}"),
        })?;
        Document::parse(&file, &text)
    }

    /// The file's name, as errors give it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn root(&self) -> Spanned<DeTable<'_>> {
        // Parsed once in `parse` already: this cannot fail.
        DeTable::parse(&self.text).unwrap_or_else(|_| Spanned::new(0..0, DeTable::default()))
    }

    /// The top-level sections the file has, with the line of each (its first header).
    pub fn sections(&self) -> Vec<(String, usize)> {
        self.root()
            .into_inner()
            .into_iter()
            .map(|(k, _)| (k.get_ref().to_string(), line_of(&self.text, k.span().start)))
            .collect()
    }

    /// Reads each block of `section` with `read`: each table of `[[section]]`, or the one table of
    /// `[section]`, in the file's order. A section of another shape (`section = 3`) is an error at its
    /// line. The file is parsed once for the whole section.
    pub fn read_section<R>(
        &self,
        section: &str,
        mut read: impl FnMut(Block<'_>) -> Result<R, ConfigError>,
    ) -> Result<Vec<R>, ConfigError> {
        let root = self.root().into_inner();
        let Some((key, value)) = root.iter().find(|(k, _)| k.get_ref() == section) else {
            return Ok(Vec::new());
        };
        let at = key.span();
        let tables: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
            DeValue::Table(_) => vec![value],
            DeValue::Array(items) if items.iter().all(|i| matches!(i.get_ref(), DeValue::Table(_))) => {
                items.iter().collect()
            }
            _ => {
                let line = line_of(&self.text, at.start);
                let message = format!("must be a table, [{section}] or [[{section}]]");
                return Err(ConfigError { file: self.file.to_string(), line, key: section.into(), message });
            }
        };
        let mut out = Vec::with_capacity(tables.len());
        let line_index = LineIndex::new(&self.text);
        for (index, value) in tables.into_iter().enumerate() {
            let header = if value.span().is_empty() { at.start } else { value.span().start };
            let place = Place {
                doc: self.clone(),
                section: section.into(),
                index,
                lines: key_lines(&line_index, value, header),
            };
            out.push(read(Block { value, place })?);
        }
        Ok(out)
    }

    /// The error a toml error is, at its line, named by the key written there (or `key` when given).
    fn toml_error(&self, e: &toml::de::Error, key: Option<&str>) -> ConfigError {
        let text = &*self.text;
        let (line, key) = match e.span() {
            Some(span) => {
                let line_start = text[..span.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
                let line_text = text[line_start..].split('\n').next().unwrap_or("");
                let written = match line_text.split_once('=') {
                    Some((k, _)) => k.trim().trim_matches(['"', '\'']).to_owned(),
                    None => text.get(span.clone()).unwrap_or("").trim().to_owned(),
                };
                (line_of(text, span.start), key.map_or(written, str::to_owned))
            }
            None => (0, key.unwrap_or("").to_owned()),
        };
        let key = if key.is_empty() { "-".to_owned() } else { key };
        ConfigError { file: self.file.to_string(), line, key, message: e.message().trim().to_owned() }
    }
}

/// The line of every key of a block (dotted inside its tables: `labels.room`, `basic_auth.password_file`),
/// and of its header under `""`.
fn key_lines(lines: &LineIndex, table: &Spanned<DeValue<'_>>, header: usize) -> Arc<BTreeMap<String, usize>> {
    fn walk(lines: &LineIndex, prefix: &str, table: &DeTable<'_>, out: &mut BTreeMap<String, usize>) {
        for (k, v) in table.iter() {
            let path =
                if prefix.is_empty() { k.get_ref().to_string() } else { format!("{prefix}.{}", k.get_ref()) };
            out.entry(path.clone()).or_insert_with(|| lines.line(k.span().start));
            if let DeValue::Table(inner) = v.get_ref() {
                walk(lines, &path, inner, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    out.insert(String::new(), lines.line(header));
    if let DeValue::Table(t) = table.get_ref() {
        walk(lines, "", t, &mut out);
    }
    Arc::new(out)
}

/// One block of a section, as the file has it, to read into the type of the layer that owns it.
#[derive(Debug)]
pub struct Block<'a> {
    value: &'a Spanned<DeValue<'a>>,
    place: Place,
}

impl Block<'_> {
    /// The block as `T`: serde's errors (an unknown key, a wrong type) at their key's line.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        T::deserialize(toml::de::ValueDeserializer::from(self.value.clone()))
            .map_err(|e| self.place.doc.toml_error(&e, None))
    }

    /// Where the block is: what later errors about it are placed with.
    pub fn place(&self) -> &Place {
        &self.place
    }
}

impl std::ops::Deref for Block<'_> {
    type Target = Place;

    fn deref(&self) -> &Place {
        &self.place
    }
}

/// Where a block is (its file, section and place among the section's blocks) and the line of every
/// key it writes, kept with what was read from it so that a problem found later (a file it names that
/// cannot be read, an address taken) is at its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    doc: Document,
    section: String,
    index: usize,
    lines: Arc<BTreeMap<String, usize>>,
}

impl Place {
    /// The section the block is of (`hmon`, `serve`).
    pub fn section(&self) -> &str {
        &self.section
    }

    /// The block's place among the blocks of its section, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The file it is in.
    pub fn file(&self) -> &str {
        self.doc.file()
    }

    /// Whether the block writes `key` (dotted for a key in one of its tables).
    pub fn has(&self, key: &str) -> bool {
        self.lines.contains_key(key)
    }

    /// The line of `key` (dotted inside a table: `labels.room`); when the block does not write it (a
    /// default, or a key that is missing), the line of its `name`, or of its header.
    pub fn line(&self, key: &str) -> usize {
        let at = self.lines.get(key).or_else(|| self.lines.get("name")).or_else(|| self.lines.get(""));
        at.copied().unwrap_or(0)
    }

    /// An error about `key`, at its line.
    pub fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.doc.file().into(),
            line: self.line(key),
            key: key.into(),
            message: message.into(),
        }
    }

    /// An error about `key` named with its section (`serve.listen`, `remote_write.basic_auth.password_file`):
    /// what the sections of settings (not of targets, whose blocks have names) say. An empty `key` is the
    /// section's.
    pub fn section_error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let named = if key.is_empty() { self.section.clone() } else { format!("{}.{key}", self.section) };
        ConfigError { key: named, ..self.error(key, message) }
    }

    /// The value of `key` as written, without quotes (`5s` of `interval = "5s"`), for messages in the
    /// user's units.
    pub fn written(&self, key: &str) -> Option<String> {
        let line = *self.lines.get(key)?;
        let l = self.doc.text().lines().nth(line.checked_sub(1)?)?;
        let value = l.split_once('=')?.1.trim();
        let value = match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next()?,
            None => value.split('#').next()?.trim(),
        };
        (!value.is_empty()).then(|| value.to_owned())
    }
}
