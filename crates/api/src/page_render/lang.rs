//! Which of the waiting page's languages a visitor gets (SPEC §6.3).
//!
//! `?lang=` wins when it names a language we speak; otherwise `Accept-Language` is read by its
//! q-values (RFC 9110 §12.5.4), and each range is matched by its primary subtag with the
//! fallbacks a reader expects: a Chinese range by script, or by region when it names none
//! (`zh-TW`, `zh-HK`, `zh-MO` read Traditional, other Chinese Simplified), any Portuguese
//! Brazilian, Indonesian's old code `in` as `id`. The header is the client's to forge: the
//! worst it does is pick another language, and only its first [`MAX_RANGES`] ranges are read.

use axum::http::{HeaderMap, header};

/// Ranges of `Accept-Language` looked at; browsers send a handful.
const MAX_RANGES: usize = 16;

/// A language the waiting page speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    En,
    Ko,
    Ja,
    ZhHans,
    ZhHant,
    Es,
    Fr,
    De,
    PtBr,
    Id,
}

impl Lang {
    /// Every language, in the order the page lists them.
    pub(crate) const ALL: [Lang; 10] = [
        Lang::En,
        Lang::Ko,
        Lang::Ja,
        Lang::ZhHans,
        Lang::ZhHant,
        Lang::Es,
        Lang::Fr,
        Lang::De,
        Lang::PtBr,
        Lang::Id,
    ];

    /// The language of a page asked for with `?lang=` (if it names one we speak), else the
    /// best of the visitor's `Accept-Language`, else English.
    pub(crate) fn choose(query: Option<&str>, headers: &HeaderMap) -> Lang {
        if let Some(lang) = query.and_then(Lang::from_tag) {
            return lang;
        }
        let accept = headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        Lang::negotiate(accept).unwrap_or(Lang::En)
    }

    /// The language of the highest-weighted range we speak; among equal weights the one named
    /// first. `*` and ranges weighted 0 choose nothing.
    fn negotiate(accept_language: &str) -> Option<Lang> {
        let mut best: Option<(u16, Lang)> = None;
        for range in accept_language.split(',').take(MAX_RANGES) {
            let mut parts = range.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let weight = parts.find_map(quality).unwrap_or(1000);
            if weight == 0 || best.is_some_and(|(top, _)| top >= weight) {
                continue;
            }
            if let Some(lang) = Lang::from_tag(tag) {
                best = Some((weight, lang));
            }
        }
        best.map(|(_, lang)| lang)
    }

    /// The language a tag (`ko`, `zh-Hant-TW`, `pt_PT`) reads as, if we speak it.
    pub(crate) fn from_tag(tag: &str) -> Option<Lang> {
        let lowered = tag.trim().to_ascii_lowercase();
        let mut subtags = lowered.split(['-', '_']);
        let primary = subtags.next().unwrap_or("");
        Some(match primary {
            "en" => Lang::En,
            "ko" => Lang::Ko,
            "ja" => Lang::Ja,
            "es" => Lang::Es,
            "fr" => Lang::Fr,
            "de" => Lang::De,
            "pt" => Lang::PtBr,
            "id" | "in" => Lang::Id,
            // Cantonese is written in Traditional characters.
            "yue" => Lang::ZhHant,
            "zh" => chinese_script(subtags),
            _ => return None,
        })
    }

    /// The code of the language: the `lang` of the page, `?lang=`, and the script's locale.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Ko => "ko",
            Lang::Ja => "ja",
            Lang::ZhHans => "zh-Hans",
            Lang::ZhHant => "zh-Hant",
            Lang::Es => "es",
            Lang::Fr => "fr",
            Lang::De => "de",
            Lang::PtBr => "pt-BR",
            Lang::Id => "id",
        }
    }

    /// The language's name in itself, for the page's language links.
    pub(crate) fn native_name(self) -> &'static str {
        match self {
            Lang::En => "English",
            Lang::Ko => "한국어",
            Lang::Ja => "日本語",
            Lang::ZhHans => "简体中文",
            Lang::ZhHant => "繁體中文",
            Lang::Es => "Español",
            Lang::Fr => "Français",
            Lang::De => "Deutsch",
            Lang::PtBr => "Português (Brasil)",
            Lang::Id => "Bahasa Indonesia",
        }
    }
}

/// Simplified or Traditional, from the subtags after `zh`: an explicit script wins, then the
/// regions that write Traditional characters.
fn chinese_script<'a>(subtags: impl Iterator<Item = &'a str>) -> Lang {
    let mut region_lang = None;
    for subtag in subtags {
        match subtag {
            "hant" => return Lang::ZhHant,
            "hans" => return Lang::ZhHans,
            "tw" | "hk" | "mo" => region_lang = region_lang.or(Some(Lang::ZhHant)),
            _ => {}
        }
    }
    region_lang.unwrap_or(Lang::ZhHans)
}

/// The weight of a `q=` parameter in thousandths; `None` for another parameter. A weight that
/// is not a number in [0, 1] counts as 0: the range is ignored rather than guessed at.
fn quality(parameter: &str) -> Option<u16> {
    let (name, value) = parameter.split_once('=')?;
    if !name.trim().eq_ignore_ascii_case("q") {
        return None;
    }
    let value = value.trim();
    let weight = match value.split_once('.') {
        None => value
            .parse::<u16>()
            .ok()
            .filter(|whole| *whole <= 1)
            .map(|whole| whole * 1000),
        Some((whole, fraction)) => {
            let fraction_ok = fraction.len() <= 3 && fraction.bytes().all(|b| b.is_ascii_digit());
            match (whole, fraction_ok) {
                ("0", true) => format!("{fraction:0<3}").parse::<u16>().ok(),
                ("1", true) if fraction.bytes().all(|b| b == b'0') => Some(1000),
                _ => None,
            }
        }
    };
    Some(weight.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(accept_language: &str, expected: Option<Lang>) {
        assert_eq!(
            Lang::negotiate(accept_language),
            expected,
            "Accept-Language: {accept_language}"
        );
    }

    #[test]
    fn the_highest_weight_we_speak_wins() {
        check("ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7", Some(Lang::Ko));
        check("en;q=0.5, de;q=0.9", Some(Lang::De));
        check("nl, fr;q=0.3, ja;q=0.4", Some(Lang::Ja));
        check("es;q=1.0, fr", Some(Lang::Es));
        check("fr;q=0.8, es;q=0.8", Some(Lang::Fr));
        check("ID", Some(Lang::Id));
    }

    #[test]
    fn chinese_reads_by_script_then_region() {
        check("zh-TW", Some(Lang::ZhHant));
        check("zh-HK,zh;q=0.9", Some(Lang::ZhHant));
        check("zh-Hant-CN", Some(Lang::ZhHant));
        check("zh-Hans-HK", Some(Lang::ZhHans));
        check("zh-CN", Some(Lang::ZhHans));
        check("zh", Some(Lang::ZhHans));
        check("zh_SG", Some(Lang::ZhHans));
        check("yue-HK", Some(Lang::ZhHant));
    }

    #[test]
    fn any_portuguese_is_brazilian_and_old_codes_still_count() {
        check("pt", Some(Lang::PtBr));
        check("pt-PT", Some(Lang::PtBr));
        check("in-ID", Some(Lang::Id));
    }

    #[test]
    fn refused_ranges_and_nonsense_choose_nothing() {
        check("", None);
        check("*", None);
        check("ko;q=0, nl", None);
        check("ko;q=2", None);
        check("ko;q=0.0001", None);
        check("ko;q=abc", None);
        check(";;;,,,==", None);
        check("koo, english", None);
    }

    #[test]
    fn only_the_first_ranges_are_read() {
        let many = format!("{}ko", "nl;q=0.1,".repeat(MAX_RANGES));
        check(&many, None);
    }

    #[test]
    fn the_query_wins_over_the_header_and_falls_back_to_english() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_LANGUAGE,
            axum::http::HeaderValue::from_static("ja"),
        );
        assert_eq!(Lang::choose(Some("zh-TW"), &headers), Lang::ZhHant);
        assert_eq!(Lang::choose(Some("pt-BR"), &headers), Lang::PtBr);
        assert_eq!(Lang::choose(Some("xx"), &headers), Lang::Ja);
        assert_eq!(Lang::choose(None, &HeaderMap::new()), Lang::En);
    }

    #[test]
    fn every_code_reads_back_as_its_language() {
        for lang in Lang::ALL {
            assert_eq!(Lang::from_tag(lang.code()), Some(lang), "{lang:?}");
        }
    }
}
