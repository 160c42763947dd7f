//! Environment overrides: `ANTEROOM_<SECTION>__<KEY>=value` applied on top of the parsed file
//! before validation (the scheme is described in the `config` module documentation).

use toml::de::DeValue;

use super::tree::{Item, Origin, Problems, Table, Value, closest};
use super::{ROOM_SECTION, TOP_LEVEL_KEYS};

const PREFIX: &str = "ANTEROOM_";

/// Applies every `ANTEROOM_…` override of `env` to `root`, reporting malformed ones.
pub(super) fn apply_overrides(root: &mut Table, env: &[(String, String)], problems: &mut Problems) {
    for (name, text) in env {
        let Some(rest) = strip_prefix(name) else {
            continue;
        };
        let origin = Origin::Env(name.clone());
        let levels: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let malformed = |level: &String| level.is_empty() || level.starts_with('_');
        if levels.len() > 1 && levels.iter().any(malformed) {
            let message = "empty name level: separate levels with exactly two underscores";
            problems.add(&origin, message);
            continue;
        }
        let section = levels[0].as_str();
        if !TOP_LEVEL_KEYS.contains(&section) {
            if levels.len() == 1 {
                hint_double_underscore(section, &origin, problems);
            } else {
                let mut message = format!("unknown config section `{section}`");
                if let Some(suggestion) = closest(section, TOP_LEVEL_KEYS.iter().copied()) {
                    message.push_str(&format!("; did you mean `{suggestion}`?"));
                }
                problems.add(&origin, message);
            }
            continue;
        }
        let item = parse_value(text, &origin);
        if section == ROOM_SECTION && levels.len() > 1 {
            override_room(root, &levels[1..], item, &origin, problems);
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
    let section = TOP_LEVEL_KEYS.iter().find(|section| {
        name.strip_prefix(**section)
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

/// `levels` is `[<id>, <field>, …]`: sets the field of every room whose id matches.
fn override_room(
    root: &mut Table,
    levels: &[String],
    item: Item,
    origin: &Origin,
    problems: &mut Problems,
) {
    if levels.len() < 2 {
        problems.add(
            origin,
            "name a room field, as in ANTEROOM_ROOM__<ID>__<FIELD>",
        );
        return;
    }
    let wanted = normalise_room_id(&levels[0]);
    let rooms = root
        .get_mut(ROOM_SECTION)
        .and_then(|entry| match &mut entry.item.value {
            Value::Array(rooms) => Some(rooms),
            _ => None,
        });
    let mut matched = false;
    for room in rooms.into_iter().flatten() {
        let Value::Table(table) = &mut room.value else {
            continue;
        };
        let id_matches = table.get("id").is_some_and(|id| match &id.item.value {
            Value::String(id) => normalise_room_id(id) == wanted,
            _ => false,
        });
        if id_matches {
            matched = true;
            set_path(table, &levels[1..], item.clone(), origin, problems);
        }
    }
    if !matched {
        problems.add(
            origin,
            format!("no room with id \"{wanted}\" in the config file"),
        );
    }
}

/// Room ids are lowercase with '-'; variable names are often uppercase with '_'.
fn normalise_room_id(id: &str) -> String {
    id.to_ascii_lowercase().replace('_', "-")
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
