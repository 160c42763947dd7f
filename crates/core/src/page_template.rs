//! Where a room's `page_template` may be read from (SPEC §6.4): only inside the node's
//! `[server] templates_dir`. Anyone who can set a room (the config file, the admin API) names
//! the file, and the page preview serves what it renders, so an unconfined path would serve the
//! signing keys or any other file the process can read.
//!
//! [`template_path`] is the lexical half (no I/O, so the config check reports it with its
//! line): the name is taken relative to the directory, an absolute path must lie inside it,
//! and no `..` may climb out. The reader of the file then resolves symbolic links and checks
//! the real path is still inside the real directory.

use std::path::{Component, Path, PathBuf};

/// Why a `page_template` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplatePathError {
    /// No `[server] templates_dir` is configured: custom pages are off.
    #[error("custom pages are read only from `[server] templates_dir`, and none is set")]
    NoTemplatesDir,
    /// An absolute path outside the directory.
    #[error("{name:?} is outside the templates directory {dir:?}")]
    Outside {
        /// The name as given.
        name: String,
        /// The templates directory.
        dir: PathBuf,
    },
    /// A `..` (or a root, or a drive prefix) inside the name.
    #[error("{name:?} must name a file inside the templates directory, without `..`")]
    Climbs {
        /// The name as given.
        name: String,
    },
}

/// The file `name` stands for inside `templates_dir` (see the module docs).
///
/// ```
/// use std::path::Path;
/// use anteroom_core::page_template::{template_path, TemplatePathError};
///
/// let dir = Path::new("/srv/pages");
/// assert_eq!(template_path(Some(dir), "sale.html").unwrap(), Path::new("/srv/pages/sale.html"));
/// assert_eq!(template_path(Some(dir), "/srv/pages/a/b.html").unwrap(), Path::new("/srv/pages/a/b.html"));
/// assert!(matches!(template_path(Some(dir), "../keys/ticket.key"), Err(TemplatePathError::Climbs { .. })));
/// assert!(matches!(template_path(Some(dir), "/etc/passwd"), Err(TemplatePathError::Outside { .. })));
/// assert_eq!(template_path(None, "sale.html"), Err(TemplatePathError::NoTemplatesDir));
/// ```
pub fn template_path(
    templates_dir: Option<&Path>,
    name: &str,
) -> Result<PathBuf, TemplatePathError> {
    let dir = templates_dir.ok_or(TemplatePathError::NoTemplatesDir)?;
    let path = Path::new(name);
    let relative = if path.is_absolute() {
        path.strip_prefix(dir)
            .map_err(|_| TemplatePathError::Outside {
                name: name.to_owned(),
                dir: dir.to_owned(),
            })?
    } else {
        path
    };
    let mut files = 0;
    for component in relative.components() {
        match component {
            Component::Normal(_) => files += 1,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(TemplatePathError::Climbs {
                    name: name.to_owned(),
                });
            }
        }
    }
    if files == 0 {
        return Err(TemplatePathError::Climbs {
            name: name.to_owned(),
        });
    }
    Ok(dir.join(relative))
}
