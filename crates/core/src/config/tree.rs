//! The parsed document as a tree whose every key and value remembers where it came from: a
//! line of the file or an environment variable. Validation reads this tree, so each problem can
//! point at its source.

use std::fmt;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Where a key or value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    /// A 1-based line of the config file.
    Line(usize),
    /// An environment variable, by name.
    Env(String),
}

impl Origin {
    /// A short description for messages that refer to another place ("line 5").
    pub(super) fn describe(&self) -> String {
        match self {
            Origin::Line(line) => format!("line {line}"),
            Origin::Env(name) => name.clone(),
        }
    }

    pub(super) fn is_env(&self) -> bool {
        matches!(self, Origin::Env(_))
    }
}

/// A value and where it was written.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) value: Value,
    pub(super) origin: Origin,
    /// For a value taken whole from an environment variable: the variable's text, so a value
    /// that happens to read as a number or boolean can still be used where text is expected.
    pub(super) env_text: Option<String>,
}

/// A TOML value whose children remember where they came from.
#[derive(Debug, Clone)]
pub(super) enum Value {
    String(String),
    /// `None` when the integer does not fit in an `i64`.
    Integer(Option<i64>),
    Float(String),
    Boolean(bool),
    Datetime(String),
    Array(Vec<Item>),
    Table(Table),
}

impl Value {
    /// The value's kind, and the value itself when it is short, for "found …" messages.
    fn describe(&self) -> String {
        match self {
            Value::String(text) => format!("string {text:?}"),
            Value::Integer(Some(number)) => format!("integer {number}"),
            Value::Integer(None) => "an integer out of range".to_owned(),
            Value::Float(text) => format!("float {text}"),
            Value::Boolean(flag) => format!("boolean {flag}"),
            Value::Datetime(text) => format!("datetime {text}"),
            Value::Array(_) => "an array".to_owned(),
            Value::Table(_) => "a table".to_owned(),
        }
    }
}

/// A table: its entries in the order the parser gave them.
#[derive(Debug, Clone, Default)]
pub(super) struct Table {
    pub(super) entries: Vec<Entry>,
}

/// One `key = value` of a table.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) key_origin: Origin,
    pub(super) item: Item,
}

impl Table {
    pub(super) fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|entry| entry.key == key)
    }

    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|entry| entry.key == key)
    }

    /// Sets `key` to `item`, replacing an existing entry in place.
    pub(super) fn set(&mut self, key: &str, key_origin: Origin, item: Item) {
        match self.get_mut(key) {
            Some(entry) => {
                entry.key_origin = key_origin;
                entry.item = item;
            }
            None => self.entries.push(Entry {
                key: key.to_owned(),
                key_origin,
                item,
            }),
        }
    }

    /// Converts a parsed document, turning byte spans into line numbers.
    pub(super) fn from_document(document: DeTable<'_>, lines: &LineIndex) -> Table {
        let mut entries: Vec<Entry> = document
            .into_iter()
            .map(|(key, value)| Entry {
                key_origin: Origin::Line(lines.line(key.span().start)),
                key: key.into_inner().into_owned(),
                item: Item::from_spanned(value, &|span| Origin::Line(lines.line(span.start))),
            })
            .collect();
        // The parser's map is ordered by key; file order reads better in problem lists.
        entries.sort_by_key(|entry| match entry.key_origin {
            Origin::Line(line) => line,
            Origin::Env(_) => usize::MAX,
        });
        Table { entries }
    }
}

impl Item {
    /// Converts a parsed value; `origin_of` maps a span to the origin recorded for it.
    pub(super) fn from_spanned(
        spanned: Spanned<DeValue<'_>>,
        origin_of: &dyn Fn(Range<usize>) -> Origin,
    ) -> Item {
        let origin = origin_of(spanned.span());
        let value = match spanned.into_inner() {
            DeValue::String(text) => Value::String(text.into_owned()),
            DeValue::Integer(integer) => {
                Value::Integer(i64::from_str_radix(integer.as_str(), integer.radix()).ok())
            }
            DeValue::Float(float) => Value::Float(float.as_str().to_owned()),
            DeValue::Boolean(flag) => Value::Boolean(flag),
            DeValue::Datetime(datetime) => Value::Datetime(datetime.to_string()),
            DeValue::Array(array) => Value::Array(
                array
                    .into_iter()
                    .map(|element| Item::from_spanned(element, origin_of))
                    .collect(),
            ),
            DeValue::Table(table) => Value::Table(Table {
                entries: table
                    .into_iter()
                    .map(|(key, value)| Entry {
                        key_origin: origin_of(key.span()),
                        key: key.into_inner().into_owned(),
                        item: Item::from_spanned(value, origin_of),
                    })
                    .collect(),
            }),
        };
        Item {
            value,
            origin,
            env_text: None,
        }
    }
}

/// Maps byte offsets of the source to 1-based line numbers.
pub(super) struct LineIndex {
    line_starts: Vec<usize>,
}

impl LineIndex {
    pub(super) fn new(source: &str) -> LineIndex {
        let mut line_starts = vec![0];
        line_starts.extend(source.match_indices('\n').map(|(offset, _)| offset + 1));
        LineIndex { line_starts }
    }

    pub(super) fn line(&self, offset: usize) -> usize {
        self.line_starts
            .partition_point(|&start| start <= offset)
            .max(1)
    }
}

/// Every problem found so far.
#[derive(Debug, Default)]
pub(super) struct Problems {
    pub(super) list: Vec<ConfigProblem>,
}

impl Problems {
    /// Records a problem at `origin`; a problem in an environment variable names it.
    pub(super) fn add(&mut self, origin: &Origin, message: impl fmt::Display) {
        let problem = match origin {
            Origin::Line(line) => ConfigProblem {
                line: Some(*line),
                message: message.to_string(),
            },
            Origin::Env(name) => ConfigProblem {
                line: None,
                message: format!("environment variable {name}: {message}"),
            },
        };
        self.list.push(problem);
    }

    /// Reports every key of `table` not in `known`, suggesting a close known key. `place` names
    /// the table in messages, such as `[server]`.
    pub(super) fn unknown_keys(&mut self, table: &Table, known: &[&str], place: &str) {
        for entry in &table.entries {
            if known.contains(&entry.key.as_str()) {
                continue;
            }
            let mut message = format!("unknown key `{}` in {place}", entry.key);
            if let Some(suggestion) = closest(&entry.key, known.iter().copied()) {
                message.push_str(&format!("; did you mean `{suggestion}`?"));
            }
            self.add(&entry.key_origin, message);
        }
    }
}

/// Typed readers: each reports a wrong type at the key and answers `None`.
impl Entry {
    pub(super) fn string(&self, problems: &mut Problems) -> Option<String> {
        match (&self.item.value, &self.item.env_text) {
            (Value::String(text), _) => Some(text.clone()),
            (Value::Array(_) | Value::Table(_), _) | (_, None) => {
                self.wrong_type("a string", problems);
                None
            }
            (_, Some(text)) => Some(text.clone()),
        }
    }

    /// A duration is written as a string such as `"10m"`; parsing it is the caller's job.
    pub(super) fn duration_text(&self, problems: &mut Problems) -> Option<String> {
        match (&self.item.value, &self.item.env_text) {
            (Value::String(text), _) => Some(text.clone()),
            (Value::Integer(_) | Value::Float(_), Some(text)) => Some(text.clone()),
            _ => {
                self.wrong_type("a duration string such as \"10m\"", problems);
                None
            }
        }
    }

    /// A time is a TOML date-time or an RFC 3339 string; parsing it is the caller's job.
    pub(super) fn time_text(&self, problems: &mut Problems) -> Option<String> {
        match (&self.item.value, &self.item.env_text) {
            (Value::String(text) | Value::Datetime(text), _) => Some(text.clone()),
            (_, Some(text)) => Some(text.clone()),
            _ => {
                self.wrong_type("an RFC 3339 time such as 2026-12-01T10:00:00Z", problems);
                None
            }
        }
    }

    pub(super) fn boolean(&self, problems: &mut Problems) -> Option<bool> {
        match &self.item.value {
            Value::Boolean(flag) => Some(*flag),
            _ => {
                self.wrong_type("true or false", problems);
                None
            }
        }
    }

    pub(super) fn unsigned(&self, problems: &mut Problems) -> Option<u64> {
        match &self.item.value {
            Value::Integer(Some(number)) => match u64::try_from(*number) {
                Ok(number) => Some(number),
                Err(_) => {
                    problems.add(
                        &self.key_origin,
                        format!("`{}` must not be negative, found {number}", self.key),
                    );
                    None
                }
            },
            _ => {
                self.wrong_type("a non-negative integer", problems);
                None
            }
        }
    }

    /// A number written as a float or an integer, such as `0.05` or `1`.
    pub(super) fn fraction(&self, problems: &mut Problems) -> Option<f64> {
        let parsed = match &self.item.value {
            Value::Float(text) => text.parse::<f64>().ok().filter(|number| number.is_finite()),
            Value::Integer(Some(number)) => Some(*number as f64),
            _ => None,
        };
        if parsed.is_none() {
            self.wrong_type("a number such as 0.05", problems);
        }
        parsed
    }

    /// An array of strings, each with its own origin. From an environment variable, plain
    /// text is also read as a comma-separated list.
    pub(super) fn strings(&self, problems: &mut Problems) -> Option<Vec<(String, Origin)>> {
        match &self.item.value {
            Value::Array(elements) => Some(
                elements
                    .iter()
                    .filter_map(|element| match &element.value {
                        Value::String(text) => Some((text.clone(), element.origin.clone())),
                        other => {
                            let message = format!(
                                "`{}` must contain only strings, found {}",
                                self.key,
                                other.describe()
                            );
                            problems.add(&element.origin, message);
                            None
                        }
                    })
                    .collect(),
            ),
            Value::String(text) if self.item.origin.is_env() => Some(
                text.split(',')
                    .map(str::trim)
                    .filter(|part| !part.is_empty())
                    .map(|part| (part.to_owned(), self.item.origin.clone()))
                    .collect(),
            ),
            _ => {
                self.wrong_type("an array of strings", problems);
                None
            }
        }
    }

    pub(super) fn table(&self, problems: &mut Problems) -> Option<&Table> {
        match &self.item.value {
            Value::Table(table) => Some(table),
            _ => {
                self.wrong_type("a table", problems);
                None
            }
        }
    }

    fn wrong_type(&self, expected: &str, problems: &mut Problems) {
        let message = format!(
            "`{}` must be {expected}, found {}",
            self.key,
            self.item.value.describe()
        );
        problems.add(&self.key_origin, message);
    }
}

/// The candidate closest to `name` when it is close enough to be a likely typo.
pub(super) fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit && *distance < name.chars().count())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, case-insensitive.
fn edit_distance(left: &str, right: &str) -> usize {
    let left: Vec<char> = left.to_lowercase().chars().collect();
    let right: Vec<char> = right.to_lowercase().chars().collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (i, left_char) in left.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, right_char) in right.iter().enumerate() {
            let substitution = previous[j] + usize::from(left_char != right_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[right.len()]
}

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The 1-based line of the file it is on; `None` for environment overrides.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}
