//! Renders the waiting page (SPEC §6.3) from its template: the built-in one, or a room's own
//! (`page_template`, §6.4), rendered by minijinja with every value escaped for HTML.
//!
//! Placeholders: `room`, `lang` (`en`, `ko`, `ja`, `zh-Hans`, `zh-Hant`, `es`, `fr`, `de`,
//! `pt-BR`, `id`; chosen in [`lang`]), `state` (`waiting`, `paused`, `prequeue`, `closed`,
//! `unavailable`, `challenge`), `position`, `ahead`, `waiting`, `serving`, `eta_seconds`,
//! `eta_text`, `opens_at` (RFC 3339, in a scheduled pre-queue), `progress_percent`,
//! `next_poll_ms`, `refresh_seconds`, `updated_at`, `return_path`, `next_room` (the room whose
//! line follows this one, when the visitor was sent here first by its `requires`), `languages`
//! (`code`, `name`, `current` of each language, for links), `t` (the texts of the chosen
//! language, [`texts`]) and `config` (what the script needs, for `tojson`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Serialize;

use anteroom_core::RoomId;
use anteroom_core::page_template::template_path;
use anteroom_core::room::RoomConfig;

pub(crate) mod lang;
pub(crate) mod texts;

use lang::Lang;
use texts::{Texts, eta_text, opens_in_text, texts};

/// The built-in waiting page.
const DEFAULT_TEMPLATE: &str = include_str!("../../../web/waiting.html");

/// Why a custom template could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The name is not a file inside the templates directory (none set, an absolute path
    /// elsewhere, a `..`, or a symbolic link leading out).
    #[error("page template {name:?} refused: {reason}")]
    Refused {
        /// The template's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The file could not be read.
    #[error("cannot read page template {path}: {source}")]
    Read {
        /// The template's path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The template does not parse or render.
    #[error("page template {path} is invalid: {source}")]
    Template {
        /// The template's path.
        path: String,
        /// The template engine's error.
        source: minijinja::Error,
    },
}

/// Renders waiting pages: the built-in template and rooms' own, loaded once and kept. Rooms'
/// own are read only from inside the templates directory (see
/// [`anteroom_core::page_template`]); without one, custom pages are refused.
pub struct PageRenderer {
    custom: RwLock<HashMap<String, Arc<minijinja::Environment<'static>>>>,
    default: minijinja::Environment<'static>,
    templates_dir: Option<PathBuf>,
}

/// A template environment that escapes every value for HTML: the figures are numbers, but
/// `return_path`, `room` and the texts reach a page, and a custom template must not turn a
/// visitor's `?return=` into script. (minijinja escapes only by file extension otherwise, and
/// the templates are named `page`.) Values a template means as markup say so: `tojson` output
/// is safe JSON; the built-in page marks its `urlencode`d return path `safe` (nothing in it
/// needs escaping), so escaping leaves it byte for byte as it was.
fn html_environment() -> minijinja::Environment<'static> {
    let mut environment = minijinja::Environment::new();
    environment.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    environment
}

impl Default for PageRenderer {
    fn default() -> Self {
        let mut default = html_environment();
        // The built-in template is part of the binary and checked by the tests.
        if let Err(error) = default.add_template("page", DEFAULT_TEMPLATE) {
            tracing::error!(%error, "the built-in waiting page does not parse");
        }
        PageRenderer {
            custom: RwLock::new(HashMap::new()),
            default,
            templates_dir: None,
        }
    }
}

impl PageRenderer {
    /// A renderer reading custom templates from `templates_dir` only.
    pub fn with_templates_dir(templates_dir: PathBuf) -> PageRenderer {
        PageRenderer {
            templates_dir: Some(templates_dir),
            ..PageRenderer::default()
        }
    }

    /// Loads and checks a custom template (`page_template`, a name inside the templates
    /// directory), so a broken or misplaced one is reported at start, or to the admin API,
    /// rather than shown to visitors.
    pub fn load(&self, path: &str) -> Result<(), PageError> {
        let file = self.confined(path)?;
        let source = std::fs::read_to_string(&file).map_err(|source| PageError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut environment = html_environment();
        environment
            .add_template_owned("page", source)
            .map_err(|source| PageError::Template {
                path: path.to_owned(),
                source,
            })?;
        let sample = PageContext::sample("preview", Lang::En, PageState::Waiting);
        environment
            .get_template("page")
            .and_then(|template| template.render(&sample))
            .map_err(|source| PageError::Template {
                path: path.to_owned(),
                source,
            })?;
        self.custom
            .write()
            .insert(path.to_owned(), Arc::new(environment));
        Ok(())
    }

    /// The real file `name` stands for, refused unless it lies inside the real templates
    /// directory: checked after following symbolic links, so a link placed in the directory
    /// cannot lead out of it.
    fn confined(&self, name: &str) -> Result<PathBuf, PageError> {
        let refused = |reason: String| PageError::Refused {
            name: name.to_owned(),
            reason,
        };
        let lexical = template_path(self.templates_dir.as_deref(), name)
            .map_err(|error| refused(error.to_string()))?;
        let (Some(dir), Ok(file)) = (&self.templates_dir, std::fs::canonicalize(&lexical)) else {
            return Ok(lexical);
        };
        let real_dir = std::fs::canonicalize(dir)
            .map_err(|error| refused(format!("cannot read the templates directory: {error}")))?;
        if file.starts_with(&real_dir) {
            Ok(file)
        } else {
            Err(refused(
                "it leads out of the templates directory through a symbolic link".to_owned(),
            ))
        }
    }

    pub(crate) fn render(&self, room: &RoomConfig, context: &PageContext) -> String {
        if !room.page_template.is_empty() {
            let custom = self.custom.read().get(&room.page_template).cloned();
            let custom = match custom {
                Some(environment) => Some(environment),
                None => match self.load(&room.page_template) {
                    Ok(()) => self.custom.read().get(&room.page_template).cloned(),
                    Err(error) => {
                        tracing::error!(room = %room.id, %error, "falling back to the built-in waiting page");
                        None
                    }
                },
            };
            if let Some(environment) = custom {
                match environment
                    .get_template("page")
                    .and_then(|template| template.render(context))
                {
                    Ok(html) => return html,
                    Err(error) => {
                        tracing::error!(room = %room.id, %error, "custom page failed to render")
                    }
                }
            }
        }
        self.default
            .get_template("page")
            .and_then(|template| template.render(context))
            .unwrap_or_else(|error| {
                tracing::error!(%error, "the built-in waiting page failed to render");
                "<!doctype html><title>Waiting room</title><p>Please wait and reload this page.</p>"
                    .to_owned()
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PageState {
    Waiting,
    Paused,
    /// A scheduled sale's pre-queue (SPEC §5.3): the page counts down to `opens_at`.
    Prequeue,
    Closed,
    Unavailable,
    /// The room asks for a proof of work before the visitor gets a place (SPEC §12).
    Challenge,
}

#[derive(Debug, Serialize)]
pub(crate) struct PageContext {
    room: String,
    lang: &'static str,
    state: PageState,
    position: u64,
    ahead: u64,
    waiting: u64,
    serving: u64,
    eta_seconds: Option<u64>,
    eta_text: String,
    opens_at: Option<String>,
    progress_percent: u64,
    next_poll_ms: u64,
    pub(crate) refresh_seconds: Option<u64>,
    pub(crate) updated_at: String,
    return_path: String,
    /// The room whose waiting page `return_path` leads to: this line is a first tier.
    next_room: Option<String>,
    /// The language links: each language's code, its name in itself, and whether it is this
    /// page's.
    languages: Vec<LanguageLink>,
    t: &'static Texts,
    pub(crate) config: serde_json::Value,
}

#[derive(Debug, Serialize)]
struct LanguageLink {
    code: &'static str,
    name: &'static str,
    current: bool,
}

impl PageContext {
    pub(crate) fn sample(room: &str, lang: Lang, state: PageState) -> PageContext {
        PageContext::build(
            room,
            lang,
            state,
            &Figures {
                position: 1234,
                ahead: 57,
                waiting: 9000,
                serving: 1177,
                eta_seconds: Some(150),
                next_poll_ms: 2000,
                // A pre-queue one hour, two minutes and five seconds before a fixed opening.
                opens_in: (state == PageState::Prequeue)
                    .then(|| ("2026-12-01T10:00:00Z".to_owned(), 3725)),
            },
            "/",
        )
    }

    pub(crate) fn build(
        room: &str,
        lang: Lang,
        state: PageState,
        figures: &Figures,
        return_path: &str,
    ) -> PageContext {
        let text = texts(lang);
        let progress = progress_percent(figures.ahead, figures.waiting);
        let waiting_like = matches!(
            state,
            PageState::Waiting | PageState::Paused | PageState::Prequeue
        );
        let refresh_seconds = match state {
            PageState::Waiting | PageState::Paused | PageState::Prequeue => {
                Some(figures.next_poll_ms.div_ceil(1000).max(2))
            }
            PageState::Closed | PageState::Unavailable => Some(30),
            // Without JavaScript there is nothing to wait for: the page says so.
            PageState::Challenge => None,
        };
        let config = script_config(room, lang, state, figures, return_path, text);
        PageContext {
            room: room.to_owned(),
            lang: lang.code(),
            state,
            position: figures.position,
            ahead: figures.ahead,
            waiting: figures.waiting,
            serving: figures.serving,
            eta_seconds: figures.eta_seconds,
            eta_text: match (state, &figures.opens_in) {
                // While admissions are paused no estimate holds, whatever the recent rate says.
                (PageState::Paused, _) => text.eta_paused.to_owned(),
                (_, Some((_, seconds))) => opens_in_text(lang, *seconds),
                _ => eta_text(lang, figures.eta_seconds),
            },
            opens_at: figures.opens_in.as_ref().map(|(at, _)| at.clone()),
            progress_percent: match state {
                // Nobody's place is known before the draw.
                PageState::Prequeue => 0,
                _ if waiting_like => progress.max(2),
                _ => 0,
            },
            next_poll_ms: figures.next_poll_ms,
            refresh_seconds,
            updated_at: String::new(),
            return_path: return_path.to_owned(),
            next_room: next_room(return_path),
            languages: language_links(lang),
            t: text,
            config,
        }
    }
}

/// What the page's script needs (`config`, for `tojson`): the figures, the texts and where
/// to follow the room.
fn script_config(
    room: &str,
    lang: Lang,
    state: PageState,
    figures: &Figures,
    return_path: &str,
    text: &Texts,
) -> serde_json::Value {
    let base = format!("/_anteroom/v1/rooms/{room}");
    serde_json::json!({
        "room": room,
        "lang": lang.code(),
        "state": state,
        "position": figures.position,
        "ahead": figures.ahead,
        "waiting": figures.waiting,
        "etaSeconds": figures.eta_seconds,
        "nextPollMs": figures.next_poll_ms,
        "opensAt": figures.opens_in.as_ref().map(|(at, _)| at),
        "returnPath": return_path,
        "statusUrl": format!("{base}/status"),
        "joinUrl": format!("{base}/join"),
        "eventsUrl": format!("{base}/events"),
        "leaveUrl": format!("{base}/leave"),
        "text": text,
    })
}

/// A link to the page in each language, `lang` marked current.
fn language_links(lang: Lang) -> Vec<LanguageLink> {
    Lang::ALL
        .iter()
        .map(|other| LanguageLink {
            code: other.code(),
            name: other.native_name(),
            current: *other == lang,
        })
        .collect()
}

/// The room of a return path that is another room's waiting page, as a tier-2 page sends its
/// visitors to tier 1 with (`requires`, SPEC §3): the page tells them a second line follows.
fn next_room(return_path: &str) -> Option<String> {
    let rest = return_path.strip_prefix("/_anteroom/wait/")?;
    let id = rest.split(['?', '/', '#']).next()?;
    RoomId::new(id).ok().map(|room| room.to_string())
}

/// How near the front of today's line the visitor is: the share of the people waiting who are
/// not ahead of them. A newcomer at the back starts near 0 %, the next in line is at 100 %. It
/// needs nothing but the status figures, so the page with and without JavaScript, every tab and
/// every refresh show the same bar.
fn progress_percent(ahead: u64, waiting: u64) -> u64 {
    (100 * waiting.saturating_sub(ahead))
        .checked_div(waiting)
        .unwrap_or(0)
        .min(100)
}

pub(crate) struct Figures {
    pub(crate) position: u64,
    pub(crate) ahead: u64,
    pub(crate) waiting: u64,
    pub(crate) serving: u64,
    pub(crate) eta_seconds: Option<u64>,
    pub(crate) next_poll_ms: u64,
    /// In a pre-queue: when it opens (RFC 3339) and how many seconds from now.
    pub(crate) opens_in: Option<(String, u64)>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn figures(ahead: u64, waiting: u64, eta_seconds: Option<u64>) -> Figures {
        Figures {
            position: 100 + ahead,
            ahead,
            waiting,
            serving: 99,
            eta_seconds,
            next_poll_ms: 2000,
            opens_in: None,
        }
    }

    #[test]
    fn a_prequeue_counts_down_and_shows_no_place() {
        let mut prequeue = figures(0, 40, Some(10));
        prequeue.opens_in = Some(("2026-12-01T10:00:00Z".to_owned(), 3725));
        for (lang, expected) in [
            (Lang::En, "opens in 1:02:05"),
            (Lang::Ko, "1:02:05 후 시작"),
        ] {
            let context = PageContext::build("r", lang, PageState::Prequeue, &prequeue, "/");
            assert_eq!(context.eta_text, expected);
            assert_eq!(context.progress_percent, 0);
            assert_eq!(context.config["opensAt"], "2026-12-01T10:00:00Z");
        }
    }

    #[test]
    fn progress_is_the_share_of_the_line_not_ahead() {
        assert_eq!(progress_percent(0, 1), 100, "next in line");
        assert_eq!(progress_percent(9, 10), 10, "last of ten");
        assert_eq!(progress_percent(0, 0), 0);
        assert_eq!(progress_percent(5, 3), 0, "stale figures never underflow");
    }

    #[test]
    fn the_bar_never_looks_empty_while_waiting() {
        let context = PageContext::build(
            "r",
            Lang::En,
            PageState::Waiting,
            &figures(999, 1000, None),
            "/",
        );
        assert_eq!(context.progress_percent, 2);
    }

    #[test]
    fn a_paused_line_shows_no_estimate() {
        for (lang, expected) in [(Lang::En, "on hold"), (Lang::Ko, "일시 중지")] {
            let context =
                PageContext::build("r", lang, PageState::Paused, &figures(0, 1, Some(0)), "/");
            assert_eq!(context.eta_text, expected);
            assert_eq!(context.t.eta_paused, expected, "the script's text agrees");
        }
        let waiting = PageContext::build(
            "r",
            Lang::En,
            PageState::Waiting,
            &figures(0, 1, Some(0)),
            "/",
        );
        assert_eq!(waiting.eta_text, "under a minute");
    }

    fn render_with(
        environment: &mut minijinja::Environment<'static>,
        source: &str,
        context: &PageContext,
    ) -> String {
        environment
            .add_template_owned("page", source.to_owned())
            .unwrap();
        environment
            .get_template("page")
            .unwrap()
            .render(context)
            .unwrap()
    }

    /// Escaping changes nothing on the built-in page: it prints its only free text (the
    /// return path) through `urlencode` and hands the script its data through `tojson`.
    #[test]
    fn escaping_leaves_the_built_in_page_as_it_was() {
        let mut prequeue = figures(3, 40, Some(90));
        prequeue.opens_in = Some(("2026-12-01T10:00:00Z".to_owned(), 3725));
        for state in [
            PageState::Waiting,
            PageState::Paused,
            PageState::Prequeue,
            PageState::Closed,
            PageState::Unavailable,
            PageState::Challenge,
        ] {
            for lang in Lang::ALL {
                let context =
                    PageContext::build("r", lang, state, &prequeue, "/cart?item=1&size=<m>\"'");
                let escaped = render_with(&mut html_environment(), DEFAULT_TEMPLATE, &context);
                let plain = render_with(
                    &mut minijinja::Environment::new(),
                    DEFAULT_TEMPLATE,
                    &context,
                );
                assert_eq!(escaped, plain, "{state:?} {lang:?}");
            }
        }
    }

    /// A custom template printing `return_path` as it is cannot be made to run a visitor's
    /// script.
    #[test]
    fn a_custom_template_escapes_what_the_visitor_sent() {
        let context = PageContext::build(
            "r",
            Lang::En,
            PageState::Waiting,
            &figures(0, 1, None),
            "/\"><script>alert(1)</script>",
        );
        let html = render_with(
            &mut html_environment(),
            "<a href=\"{{ return_path }}\">back</a>",
            &context,
        );
        assert_eq!(
            html,
            "<a href=\"&#x2f;&quot;&gt;&lt;script&gt;alert(1)&lt;&#x2f;script&gt;\">back</a>"
        );
    }
}
