//! Environment overrides: `ANTEROOM_<SECTION>__<KEY>=value` applied on top of the parsed file
//! before validation (the scheme is described in the `config` module documentation).

use toml::de::DeValue;

use super::top_level::{RATE_LIMIT_SECTION, ROOM_SECTION, top_level_keys};
use super::tree::{Item, Origin, Problems, Table, Value, closest};

const PREFIX: &str = "ANTEROOM_";

/// `ANTEROOM_LOG` (the log filter) and `ANTEROOM_LOG_FORMAT` belong to the program, although
/// they look like the `[log]` section: they are never config overrides.
const PROGRAM_VARIABLES: &[&str] = &["LOG", "LOG_FORMAT"];

/// Applies every `ANTEROOM_…` override of `env` to `root`, reporting malformed ones.
pub(super) fn apply_overrides(root: &mut Table, env: &[(String, String)], problems: &mut Problems) {
    for (name, text) in env {
        let Some(rest) = strip_prefix(name) else {
            continue;
        };
        if PROGRAM_VARIABLES
            .iter()
            .any(|variable| rest.eq_ignore_ascii_case(variable))
        {
            continue;
        }
        let origin = Origin::Env(name.clone());
        let levels: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let malformed = |level: &String| level.is_empty() || level.starts_with('_');
        if levels.len() > 1 && levels.iter().any(malformed) {
            let message = "empty name level: separate levels with exactly two underscores";
            problems.add(&origin, message);
            continue;
        }
        let section = levels[0].as_str();
        if !top_level_keys().any(|key| key == section) {
            if levels.len() == 1 {
                hint_double_underscore(section, &origin, problems);
            } else {
                let mut message = format!("unknown config section `{section}`");
                if let Some(suggestion) = closest(section, top_level_keys()) {
                    message.push_str(&format!("; did you mean `{suggestion}`?"));
                }
                problems.add(&origin, message);
            }
            continue;
        }
        let item = parse_value(text, &origin);
        if let Some(entries) = NamedEntries::of(section)
            && levels.len() > 1
        {
            override_named(root, entries, &levels[1..], item, &origin, problems);
        } else {
            set_path(root, &levels, item, &origin, problems);
        }
    }
}

/// The part of `name` after a case-insensitive `ANTEROOM_`.
fn strip_prefix(name: &str) -> Option<&str> {
    let head = name.get(..PREFIX.len())?;
    head.eq_ignore_ascii_case(PREFIX)
        .then(|| &name[PREFIX.len()..])
}

/// Names without `__` that are not a section belong to the program (such as the config file's
/// path) and are left alone, unless they look like a section with a single underscore.
fn hint_double_underscore(name: &str, origin: &Origin, problems: &mut Problems) {
    let section = top_level_keys().find(|section| {
        name.strip_prefix(section)
            .is_some_and(|rest| rest.starts_with('_') && rest.len() > 1)
    });
    if let Some(section) = section {
        let key = &name[section.len() + 1..];
        problems.add(
            origin,
            format!(
                "separate levels with two underscores, as in ANTEROOM_{}__{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            ),
        );
    }
}

/// A TOML value when the text reads as one, else the text itself as a string.
fn parse_value(text: &str, origin: &Origin) -> Item {
    match DeValue::parse(text.trim()) {
        Ok(value) => {
            let mut item = Item::from_spanned(value, &|_| origin.clone());
            item.env_text = Some(text.to_owned());
            item
        }
        Err(_) => Item {
            value: Value::String(text.to_owned()),
            origin: origin.clone(),
            env_text: Some(text.to_owned()),
        },
    }
}

/// An array of tables whose entries the environment addresses by one of their fields.
#[derive(Clone, Copy)]
struct NamedEntries {
    section: &'static str,
    /// The field that names an entry.
    name_field: &'static str,
    /// How messages call an entry, and its name.
    noun: &'static str,
    name_noun: &'static str,
    /// The variable's shape, for a message when the field is missing.
    shape: &'static str,
}

impl NamedEntries {
    fn of(section: &str) -> Option<NamedEntries> {
        match section {
            ROOM_SECTION => Some(NamedEntries {
                section: ROOM_SECTION,
                name_field: "id",
                noun: "room",
                name_noun: "with id",
                shape: "ANTEROOM_ROOM__<ID>__<FIELD>",
            }),
            RATE_LIMIT_SECTION => Some(NamedEntries {
                section: RATE_LIMIT_SECTION,
                name_field: "name",
                noun: "rate limit",
                name_noun: "named",
                shape: "ANTEROOM_RATE_LIMIT__<NAME>__<FIELD>",
            }),
            _ => None,
        }
    }
}

/// `levels` is `[<name>, <field>, …]`: sets the field of every entry whose name matches.
fn override_named(
    root: &mut Table,
    entries: NamedEntries,
    levels: &[String],
    item: Item,
    origin: &Origin,
    problems: &mut Problems,
) {
    if levels.len() < 2 {
        problems.add(
            origin,
            format!("name a {} field, as in {}", entries.noun, entries.shape),
        );
        return;
    }
    let wanted = normalise_name(&levels[0]);
    let tables = root
        .get_mut(entries.section)
        .and_then(|entry| match &mut entry.item.value {
            Value::Array(tables) => Some(tables),
            _ => None,
        });
    let mut matched = false;
    for element in tables.into_iter().flatten() {
        let Value::Table(table) = &mut element.value else {
            continue;
        };
        let name_matches =
            table
                .get(entries.name_field)
                .is_some_and(|name| match &name.item.value {
                    Value::String(name) => normalise_name(name) == wanted,
                    _ => false,
                });
        if name_matches {
            matched = true;
            set_path(table, &levels[1..], item.clone(), origin, problems);
        }
    }
    if !matched {
        problems.add(
            origin,
            format!(
                "no {} {} \"{wanted}\" in the config file",
                entries.noun, entries.name_noun
            ),
        );
    }
}

/// Ids and names are written with '-'; variable names are often uppercase with '_'.
fn normalise_name(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Sets `levels` (a path of keys) in `table`, creating missing tables on the way.
fn set_path(
    table: &mut Table,
    levels: &[String],
    item: Item,
    origin: &Origin,
    problems: &mut Problems,
) {
    let Some((last, parents)) = levels.split_last() else {
        return;
    };
    let mut current = table;
    for key in parents {
        if current.get(key).is_none() {
            let empty = Item {
                value: Value::Table(Table::default()),
                origin: origin.clone(),
                env_text: None,
            };
            current.set(key, origin.clone(), empty);
        }
        let Some(entry) = current.get_mut(key) else {
            return;
        };
        match &mut entry.item.value {
            Value::Table(inner) => current = inner,
            _ => {
                problems.add(
                    origin,
                    format!("`{key}` is not a table, so it has no keys to override"),
                );
                return;
            }
        }
    }
    current.set(last, origin.clone(), item);
}
